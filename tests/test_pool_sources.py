"""Pools named where engines keep them (compile_checks.pools), and the naming invariant's negative controls."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch

from compile_checks.pools import (
    PoolNamingError,
    pools_from_forward_context,
    pools_from_module,
    pools_from_tensors,
    resolve_pools,
    validate_pools,
)

N, H, D = 16, 2, 4


class Attn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(N, H, D), persistent=False)
        self.register_buffer("v_cache", torch.zeros(N, H, D), persistent=False)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attn()
        self.proj = torch.nn.Linear(D, D)


class Model(torch.nn.Module):
    def __init__(self, layers: int = 3) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))


class KVPools(NamedTuple):  # vLLM-Omni keeps split flat pools in a NamedTuple
    k: torch.Tensor
    v: torch.Tensor


class CacheHolder:  # a private cache object, not a module
    def __init__(self) -> None:
        self.pools = KVPools(torch.zeros(N, H, D), torch.zeros(N, H, D))
        self.meta = {"local_end_index": 3}


def test_module_tree_by_glob_and_by_name() -> None:
    m = Model()
    pools = pools_from_module(m, "blocks.*.attn.k_cache", "blocks.*.attn.v_cache")
    assert sorted(pools) == sorted(f"blocks.{i}.attn.{kv}_cache" for i in range(3) for kv in "kv")
    assert pools["blocks.1.attn.k_cache"] is m.blocks[1].attn.k_cache
    named = pools_from_module(m, names={"blocks.0.attn.k_cache": "layer0.k", "blocks.0.attn.v_cache": "layer0.v"})
    assert named == {"layer0.k": m.blocks[0].attn.k_cache, "layer0.v": m.blocks[0].attn.v_cache}
    # the parameters of Linear are not pools: a glob names only what it matches
    assert not any("proj" in n for n in pools)


def test_cache_object_and_namedtuple() -> None:
    holder = CacheHolder()
    assert pools_from_module(holder, "pools.*") == {"pools.k": holder.pools.k, "pools.v": holder.pools.v}
    assert pools_from_tensors(holder.pools, "layer0") == {"layer0.k": holder.pools.k, "layer0.v": holder.pools.v}


def test_callable_is_reread_so_rebuilt_tensors_are_followed() -> None:
    holder = CacheHolder()
    pools = lambda: pools_from_tensors(holder.pools, "layer0")  # noqa: E731
    first = resolve_pools(pools)
    holder.pools = KVPools(torch.zeros(N, H, D), torch.zeros(N, H, D))  # the engine rebuilt its cache
    second = resolve_pools(pools)
    assert first is not None and second is not None
    assert second["layer0.k"] is holder.pools.k and first["layer0.k"] is not second["layer0.k"]


class FakeAttention:
    """The one attribute vLLM's forward context exposes per attention layer (bound by bind_kv_cache)."""

    def __init__(self) -> None:
        self.kv_cache = torch.tensor([])  # vLLM's placeholder until bind_kv_cache


def _bind(layer: FakeAttention, cache: torch.Tensor) -> None:
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    AttentionLayerBase.bind_kv_cache(layer, cache)  # type: ignore[arg-type]  # vLLM's own binding


def test_forward_context_fused_caches_split_into_k_and_v() -> None:
    ctx = {f"model.layers.{i}.self_attn.attn": FakeAttention() for i in range(2)}
    for layer in ctx.values():
        _bind(layer, torch.zeros(2, 4, 4, H, D))  # (2, num_blocks, block_size, heads, dim)
    pools = pools_from_forward_context(ctx)
    assert sorted(pools) == sorted(f"model.layers.{i}.self_attn.attn.{kv}" for i in range(2) for kv in "kv")
    k = pools["model.layers.0.self_attn.attn.k"]
    fused = ctx["model.layers.0.self_attn.attn"].kv_cache
    assert k.shape == (4, 4, H, D) and k.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()


def test_forward_context_unbound_placeholder_is_an_error() -> None:
    with pytest.raises(PoolNamingError, match="no KV cache bound"):
        pools_from_forward_context({"layer": FakeAttention()})


def test_a_tensor_named_twice_is_an_error_not_a_dropped_name() -> None:
    k = torch.zeros(N, H, D)
    with pytest.raises(PoolNamingError, match="is the same tensor as"):
        validate_pools({"layer0.k": k, "alias.k": k})
    holder = CacheHolder()
    holder.current_k = holder.pools.k  # one tensor reachable by two paths: both globs name it
    with pytest.raises(PoolNamingError, match="is the same tensor as"):
        pools_from_module(holder, "pools.k", "current_k")
    # the same path given a name and matched by a glob is one pool, under the given name
    one = pools_from_module(Model(1), "blocks.0.attn.k_cache", names={"blocks.0.attn.k_cache": "layer0.k"})
    assert list(one) == ["layer0.k"]


def test_overlapping_names_are_an_error_and_adjacent_halves_are_not() -> None:
    kv = torch.zeros(2, N, H, D)
    assert sorted(validate_pools({"k": kv[0], "v": kv[1]})) == ["k", "v"]  # adjacent, not overlapping
    with pytest.raises(PoolNamingError, match="overlaps"):
        validate_pools({"kv": kv, "k": kv[0]})


def test_pattern_that_matches_nothing_is_an_error() -> None:
    with pytest.raises(PoolNamingError, match="matches no tensor"):
        pools_from_module(Model(1), "blocks.*.attn.kv_cache")
