"""Pools built without allocating (meta, FakeTensorMode) are named by storage identity; meta -> fake keeps aliasing.

Every meta or fake storage reports data pointer 0: telling pools apart by it makes two separate pools
"the same tensor". Each test has its negative control: what must still be refused is refused.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

from ar_paging.paged_write import paged_write
from ar_paging.pool import allocate_kv_pool_with_views
from compile_checks.api import CloneCheck
from compile_checks.check.runtime_pools import PoolIndex
from compile_checks.check.storage_identity import has_no_values, storage_key
from compile_checks.errors import UsageError
from compile_checks.no_values import MetaToFake, Storage, no_values
from compile_checks.pools import PoolNamingError, pools_from_module, split_kv_cache, validate_pools

BUILDS = ["meta", "fake"]


def building(kind: str) -> AbstractContextManager[Any]:
    return torch.device("meta") if kind == "meta" else FakeTensorMode() if kind == "fake" else nullcontext()


@pytest.mark.parametrize("kind", BUILDS)
def test_separate_pools_without_values_are_two_pools(kind: str) -> None:
    with building(kind):
        k, v = torch.zeros(16, 2, 8), torch.zeros(16, 2, 8)
    assert has_no_values(k) and storage_key(k) != storage_key(v)
    assert list(validate_pools({"layer0.k": k, "layer0.v": v})) == ["layer0.k", "layer0.v"]


@pytest.mark.parametrize("kind", BUILDS)
def test_one_tensor_named_twice_is_still_refused(kind: str) -> None:
    with building(kind):
        k = torch.zeros(16, 2, 8)
    with pytest.raises(PoolNamingError, match="is the same tensor as pool 'a'"):
        validate_pools({"a": k, "b": k})
    with pytest.raises(PoolNamingError, match="overlaps pool 'a'"):
        validate_pools({"a": k, "b": k[4:8]})


@pytest.mark.parametrize("kind", BUILDS)
def test_fused_halves_are_one_storage_two_disjoint_pools(kind: str) -> None:
    with building(kind):
        kv = torch.zeros(2, 16, 2, 8)
        interleaved = torch.zeros(16, 2, 4, 2, 8)  # FlashInfer's (num_blocks, 2, block, heads, dim)
    pools = validate_pools({**split_kv_cache("layer0", kv), **split_kv_cache("layer1", interleaved, kv_dim=1)})
    assert storage_key(pools["layer0.k"]) == storage_key(pools["layer0.v"])
    assert storage_key(pools["layer0.k"]) != storage_key(pools["layer1.k"])
    index = PoolIndex(pools)  # what the runtime attribution matches each graph input against
    assert index.touched(pools["layer0.v"]) == ["layer0.v"]
    assert index.touched(interleaved[:, 1]) == ["layer1.v"]
    assert index.touched(kv) == ["layer0.k", "layer0.v"]


def test_real_pools_keep_their_data_pointer() -> None:
    kv = torch.zeros(2, 4)
    assert storage_key(kv[1]) == kv.untyped_storage().data_ptr() != 0
    assert not has_no_values(kv)


@pytest.mark.parametrize("kind", BUILDS)
def test_ar_paging_pools_and_paged_write_without_values(kind: str) -> None:
    device = "meta" if kind == "meta" else "cpu"
    context = building(kind)  # entered twice: one FakeTensorMode
    with context:
        kv_pools, k_pools, v_pools = allocate_kv_pool_with_views(8, 4, 2, 2, 16, torch.bfloat16, device)
        new = torch.zeros(1, 4, 2, 16, dtype=torch.bfloat16)
        slots = torch.arange(4).view(1, 4)
        paged_write(k_pools[1], v_pools[1], new, new.clone(), slots)  # the meta / fake kernel
    pools = validate_pools({f"layer{i}.{n}": t for i, (k, v) in enumerate(kv_pools) for n, t in (("k", k), ("v", v))})
    assert len({storage_key(t) for t in pools.values()}) == 4
    assert storage_key(k_pools[0]) == storage_key(kv_pools[0][0])  # the flat view is the pool's storage
    with context, pytest.raises(ValueError, match="v_pool shape"):  # its checks still run
        paged_write(k_pools[0], v_pools[0][:4], new, new, slots)


def test_mixed_real_and_meta_is_a_usage_error() -> None:
    with torch.device("meta"):
        meta = torch.zeros(4)
    assert no_values({"a": torch.zeros(4)}) is None
    assert no_values({"a": meta}).storage == Storage.META  # type: ignore[union-attr]
    with pytest.raises(UsageError, match="1 real tensor"):
        no_values({"a": meta}, (torch.zeros(2),))
    with FakeTensorMode():
        one = torch.zeros(2)
    with FakeTensorMode():
        two = torch.zeros(2)
    with pytest.raises(UsageError, match="2 FakeTensorModes"):
        no_values({"a": one, "b": two})


def test_clone_check_on_meta_pools_says_how_to_build() -> None:
    with torch.device("meta"):
        k = torch.zeros(4, 2)
    with pytest.raises(UsageError, match="pools are on meta"):
        CloneCheck(pools={"k": k})


class LayerKV(NamedTuple):
    k: torch.Tensor
    v: torch.Tensor


class Cache:
    def __init__(self) -> None:
        self.layers = [LayerKV(*torch.zeros(2, 8, 2, 4).unbind(0)), LayerKV(torch.zeros(8, 2, 4), torch.zeros(8, 2, 4))]


def test_meta_to_fake_replaces_in_place_and_keeps_aliasing() -> None:
    with torch.device("meta"):
        cache = Cache()
        model = torch.nn.Linear(4, 4)
        model.cache = cache  # type: ignore[assignment]
        noise = torch.randn(3, 4)

    def driver(step: Any) -> Any:
        return step(noise)

    before = pools_from_module(cache, "layers.*")
    to_fake = MetaToFake(FakeTensorMode())
    for part in (model, driver):
        to_fake.swap(part)
    pools = pools_from_module(cache, "layers.*")  # read again: the cache's tuples were rebuilt in its list
    assert list(pools) == list(before)
    assert all(is_fake(t) and t.device.type == "cpu" for t in [*pools.values(), model.weight, model.bias])
    assert isinstance(model.weight, torch.nn.Parameter)
    assert is_fake(driver.__closure__[0].cell_contents)  # type: ignore[index]
    fused_k, fused_v, split_k, split_v = pools.values()
    assert storage_key(fused_k) == storage_key(fused_v) != storage_key(split_k) != storage_key(split_v)
    assert fused_v._base is not None and fused_v.storage_offset() == 8 * 2 * 4  # still a view of its base
    assert to_fake.converted == 7  # 4 pools, weight, bias, noise: each once


def test_meta_to_fake_leaves_real_tensors_alone() -> None:
    real = torch.zeros(3)
    holder = {"t": real}
    MetaToFake(FakeTensorMode()).swap(holder)
    assert holder["t"] is real


MIXED_TARGET = """
import torch
from compile_checks import Case

def cases():
    with torch.device("meta"):
        pool = torch.zeros(8, 2)
    return [Case("mixed", lambda x: pool.add_(x), args=(torch.ones(8, 2),), pools={"p": pool})]
"""


def test_gate_calls_real_beside_meta_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from compile_checks.cli import main

    (tmp_path / "mixed.py").write_text(MIXED_TARGET)
    assert main(["gate", f"{tmp_path / 'mixed.py'}:cases", "--json", "--no-progress"]) == 2
    (case,) = json.loads(capsys.readouterr().out)["cases"]
    assert "real tensor(s) beside meta or fake ones" in case["error"]


@pytest.mark.parametrize("kind", BUILDS)
def test_naming_many_pools_keys_each_pool_once(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 40-block engine names 80 pools before every region call: validating them must not compare every
    pair (on fake tensors each storage lookup dispatches). The overlap is still refused (negative control)."""
    import compile_checks.pools as pools_module

    calls: list[int] = []

    def counted(t: torch.Tensor) -> int:
        calls.append(1)
        return storage_key(t)

    monkeypatch.setattr(pools_module, "storage_key", counted)
    with building(kind):
        layers = [torch.zeros(2, 16, 2, 8).unbind(0) for _ in range(40)]
    pools = {f"layer{i}.{kv}": t for i, pair in enumerate(layers) for kv, t in zip("kv", pair)}
    assert list(validate_pools(pools)) == list(pools)
    assert len(calls) == len(pools)  # once per pool, not once per pair
    with pytest.raises(PoolNamingError, match=r"overlaps pool 'layer3\.v'"):
        validate_pools({**pools, "window": layers[3][1][4:8]})
