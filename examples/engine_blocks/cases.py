"""The block-compiled engine's gate: compiled per block as in production, pools named in its cache.

- ``split``: the declared commit op on split pools: clean.
- ``fused``: K and V of each layer as views of one allocation: the V pool is cloned in every block
  (negative control; each copy is attributed to *that* block's pool although one compiled code
  object serves every block).

``cases`` is a zero-argument factory: every gate run (and pipeline) gets a fresh model and cache.
"""

from __future__ import annotations

from typing import Any

import torch
from blocks_dit import BlocksConfig, BlocksDiT, KVCache, compile_blocks, rollout

from compile_checks import Case
from compile_checks.pools import pools_from_module

CONFIG = BlocksConfig()


def layer_pool_names(cfg: BlocksConfig) -> dict[str, str]:
    """Dotted paths in the cache object -> the names the gate reports (``layers.0.k`` -> ``layer0.k``)."""
    return {f"layers.{i}.{kv}": f"layer{i}.{kv}" for i in range(cfg.num_layers) for kv in "kv"}


def build_case(
    name: str,
    *,
    layout: str = "split",
    write: str = "paged_write",
    expect_clean: bool = True,
    cfg: BlocksConfig = CONFIG,
    **case_fields: Any,
) -> Case:
    """One rollout of ``cfg.num_chunks`` chunks; eager reference on a cache of its own."""
    noise = torch.randn(cfg.num_chunks, cfg.chunk_tokens, cfg.dim, generator=torch.Generator().manual_seed(1))

    def make_model(cache: KVCache) -> BlocksDiT:
        torch.manual_seed(0)
        return BlocksDiT(cfg, cache, write).eval().requires_grad_(False)

    reference = rollout(cfg, noise)(make_model(KVCache(cfg, layout)))
    cache = KVCache(cfg, layout)
    model = make_model(cache)  # re-binds the forward context to this cache

    def verify(output: torch.Tensor) -> tuple[bool, float]:
        return torch.allclose(output, reference, rtol=1e-4, atol=1e-5), float((output - reference).abs().max())

    return Case(
        name=name,
        fn=model,
        compile=lambda backend: compile_blocks(model, backend),  # per block, in place: the driver calls model
        pools=lambda: pools_from_module(cache, names=layer_pool_names(cfg)),  # re-read: follows a rebuilt cache
        driver=rollout(cfg, noise),
        expect_clean=expect_clean,
        verify=verify,
        description=f"{cfg.num_layers} blocks compiled one by one, {layout} pools in a cache object, {write}",
        **case_fields,
    )


def cases() -> list[Case]:
    return [
        build_case("split"),
        build_case("fused", layout="fused", expect_clean=False),
    ]


def negative_controls() -> list[Case]:
    """The cache writes the compiler cannot see: each must FAIL the gate (exit 1), naming its finding.

    ``side_effect``: vLLM's side-effect write pattern copied into an engine op (no ``(a!)`` in its
    schema): ``undeclared_write``. ``lost``: the same op with its dummy output unused, which
    Inductor removes, so the compiled rollout never writes the cache: ``lost_write``.
    """
    return [build_case("side_effect", write="side_effect"), build_case("lost", write="lost")]
