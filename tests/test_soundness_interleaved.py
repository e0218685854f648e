"""Interleaved K/V views of one storage: pools are disjoint by elements, not by byte span.

FlashInfer's cache ``(num_blocks, 2, block_size, H, D)`` gives ``k = kv[:, 0]`` and ``v = kv[:, 1]``:
their byte spans overlap, their elements do not. Naming them was refused (``pool 'layer0.v' overlaps
pool 'layer0.k'``) and, at run time, an input of K "touched" V. Truth for the verdicts: the pool-sized
buffers of Inductor's generated code; element sets enumerated by brute force for the overlap rule.
Negative controls: truly overlapping names are still refused; byte spans alone would call the
interleaved halves overlapping.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from _checks import pool_sized_allocations

from compile_checks.api import analyze_pool_clones
from compile_checks.check.graph.geometry import StorageRef, geometry_of
from compile_checks.check.graph.overlap import views_overlap
from compile_checks.check.runtime_pools import PoolIndex
from compile_checks.pools import PoolNamingError, pools_from_forward_context, split_kv_cache, validate_pools

NB, BS, H, D = 8, 4, 2, 8


def _flashinfer() -> torch.Tensor:
    return torch.zeros(NB, 2, BS, H, D)


def _bytes(t: torch.Tensor) -> set[int]:
    size = t.element_size()
    out: set[int] = set()
    for idx in itertools.product(*(range(n) for n in t.shape)):
        e = t.storage_offset() + sum(i * s for i, s in zip(idx, t.stride()))
        out.update(range(e * size, (e + 1) * size))
    return out


def _views() -> dict[str, torch.Tensor]:
    kv = torch.zeros(4, 2, 3, 5)
    flat = kv.view(4, 30)
    return {
        "k": kv[:, 0],
        "v": kv[:, 1],
        "k_slot1": kv[:, 0, 1],
        "kv_slot1": kv[:, :, 1],
        "block1": kv[1],
        "v_tail": kv[:, 1, :, 2:],
        "cols_head": flat[:, :7],
        "cols_tail": flat[:, 7:],
        "range": kv.view(-1)[3:50],
        "even_blocks_k": kv[::2, 0],
        "odd_blocks_v": kv[1::2, 1],
        "as_bytes": kv.view(torch.uint8)[:, :60],
    }


def test_overlap_by_elements_agrees_with_brute_force_on_every_pair() -> None:
    views = _views()
    exact = 0
    for (a, ta), (b, tb) in itertools.product(views.items(), repeat=2):
        truth = bool(_bytes(ta) & _bytes(tb))
        got = views_overlap(geometry_of(ta), geometry_of(tb))  # type: ignore[arg-type]
        assert got or not truth, f"{a} / {b}: a shared element missed"
        exact += got == truth
    assert exact == len(views) ** 2  # these layouts all nest: every answer exact, none merely conservative


def test_byte_spans_alone_call_the_interleaved_halves_overlapping() -> None:
    """Negative control for the rule above: what the check used to decide by."""
    views = _views()
    k, v = StorageRef.of(views["k"]), StorageRef.of(views["v"])
    (lo, hi), (vlo, vhi) = k.byte_span(), v.byte_span()
    assert lo < vhi and vlo < hi and not views_overlap(k.geometry, v.geometry)


def test_interleaved_and_split_column_pools_are_named_and_overlapping_ones_refused() -> None:
    kv = _flashinfer()
    assert sorted(validate_pools({"layer0.k": kv[:, 0], "layer0.v": kv[:, 1]})) == ["layer0.k", "layer0.v"]
    x = torch.zeros(6, 8)  # PyTorch's own test_split layout
    assert sorted(validate_pools({"a": x[:, :4], "b": x[:, 4:]})) == ["a", "b"]
    with pytest.raises(PoolNamingError, match="overlaps"):
        validate_pools({"layer0.k": kv[:, 0], "slot0": kv[:, :, 0]})  # slot 0 of K and of V: shares K's
    with pytest.raises(PoolNamingError, match="overlaps"):
        validate_pools({"a": x[:, :5], "b": x[:, 4:]})  # column 4 twice
    with pytest.raises(PoolNamingError, match="is the same tensor as"):
        validate_pools({"layer0.k": kv[:, 0], "again": kv[:, 0]})


def test_forward_context_splits_a_cache_whose_kv_dim_is_1() -> None:
    class Layer:
        def __init__(self, cache: torch.Tensor) -> None:
            self.kv_cache = cache

    kv = _flashinfer()
    pools = pools_from_forward_context({"layer0": Layer(kv)}, kv_dim=1)
    assert sorted(pools) == ["layer0.k", "layer0.v"]
    assert torch.equal(pools["layer0.v"], kv[:, 1]) and pools["layer0.v"].storage_offset() == BS * H * D
    assert sorted(pools_from_forward_context({"layer0": Layer(kv)}, kv_dim=None)) == ["layer0.k", "layer0.v"]
    with pytest.raises(PoolNamingError, match="dims 0 and 1"):
        split_kv_cache("layer0", torch.zeros(2, 2, BS, H, D), kv_dim=None)  # two blocks: ambiguous


def test_a_write_into_one_half_is_matched_to_that_half() -> None:
    kv = _flashinfer()
    index = PoolIndex({"layer0.k": kv[:, 0], "layer0.v": kv[:, 1]})
    assert index.touched(kv[:, 0]) == ["layer0.k"] and index.touched(kv[3, 1]) == ["layer0.v"]
    assert sorted(index.touched(kv[3])) == ["layer0.k", "layer0.v"]  # a block holds both halves
    whole = StorageRef.of(kv)
    assert index.match(StorageRef.of(kv[3, 0]), whole) == "layer0.k"  # both spans hold it; only K's elements
    assert index.match(StorageRef.of(kv[3, 1]), whole) == "layer0.v"


def _read_then_write_both(k, v, new, slots):
    before = k[0:2].sum() + v[0:2].sum()
    k[slots] = new
    v[slots] = new
    return before


def _write_k_only(k, new, slots):
    k[slots] = new
    return new.sum()


@pytest.mark.compile
@pytest.mark.parametrize("copying", [True, False], ids=["read_then_write", "write_only"])
def test_interleaved_pools_agree_with_the_generated_code(copying: bool) -> None:
    """Each copy is attributed to its own half (K's and V's buffers in the code); the clean twin writes K in
    place (no buffer) and V, which that region never receives, is reported unreceived (byte spans said it was)."""
    from torch._inductor.utils import run_and_get_code

    kv = _flashinfer()
    k, v = kv[:, 0], kv[:, 1]
    new, slots = torch.ones(2, BS, H, D), torch.tensor([3, 5])
    pools = {"layer0.k": k, "layer0.v": v}
    if copying:
        report, codes = run_and_get_code(
            lambda: analyze_pool_clones(_read_then_write_both, k, v, new, slots, pools=pools)
        )
    else:
        report, codes = run_and_get_code(lambda: analyze_pool_clones(_write_k_only, k, new, slots, pools=pools))
    pool_bytes = k.numel() * 4
    buffers = pool_sized_allocations("\n".join(codes), pool_bytes)
    copies = sorted((c.pool, c.nbytes) for c in report.clones)
    assert report.other_clones == []
    if copying:
        assert buffers == [pool_bytes, pool_bytes]
        assert copies == [("layer0.k", pool_bytes), ("layer0.v", pool_bytes)]
    else:
        assert buffers == [] and copies == []
        assert report.unreceived_pools == ["layer0.v"]
    assert float(k[3].sum()) == BS * H * D and float(v.sum()) == (2 * BS * H * D if copying else 0)
