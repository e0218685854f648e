"""Issue 8 items 2-4: pool attribution from each call's runtime tensors, no silent drop.

Item 2: a named pool no region received (stale / rebuilt tensor) fails the check, and a
copy of a mutated input that matches no named pool is not clean.
Item 3: no cap on distinct input signatures (a layer seen after 300 others is attributed).
Item 4: ``dynamic=True`` with pools of different sizes: the right pool, the bytes of each size.
"""

from __future__ import annotations

import pytest
import sympy
import torch
from _soundness_steps import (
    chunk,
    commit_args,
    op_commit_after_gather,
    op_commit_graph_break,
    op_commit_late_read,
    pools_fused,
    pools_split,
)

from compile_checks.api import CloneCheck, analyze_pool_clones, assert_no_pool_clones
from compile_checks.check.graph.geometry import TensorGeometry

pytestmark = pytest.mark.compile


def test_stale_named_pools_fail_the_check_and_say_so() -> None:
    k, v = pools_split()
    stale = {"layer0.k": k.clone(), "layer0.v": v.clone()}
    with pytest.raises(AssertionError) as err:
        assert_no_pool_clones(op_commit_late_read, k, v, *commit_args(), pools=stale, analysis_only=True)
    msg = str(err.value)
    assert "named pool 'layer0.k' was never received by any compiled region" in msg
    assert "named pool 'layer0.v' was never received by any compiled region" in msg
    assert "matches no named pool" in msg and "v_pool" in msg


def test_received_pools_are_attributed_and_not_flagged() -> None:
    """Clean twin of the above: the same call with the real pools names the clone, no error."""
    k, v = pools_split()
    report = analyze_pool_clones(
        op_commit_late_read, k, v, *commit_args(), pools={"layer0.k": k, "layer0.v": v}, analysis_only=True
    )
    assert report.unreceived_pools == [] and report.errors == [] and report.other_clones == []
    assert [(c.arg, c.pool) for c in report.clones] == [("v_pool", "layer0.v")]


def test_clean_function_with_one_stale_pool_fails() -> None:
    k, v = pools_split()
    report = analyze_pool_clones(
        op_commit_after_gather,
        k,
        v,
        *commit_args(),
        pools={"layer0.k": k, "layer0.v": v, "old.v": v.clone()},
        analysis_only=True,
    )
    assert report.clean and not report.check_passed and report.unreceived_pools == ["old.v"]


def test_unnamed_copy_of_a_mutated_input_is_not_clean() -> None:
    k, v = pools_split()
    other = torch.zeros_like(k)
    report = analyze_pool_clones(
        op_commit_late_read, k, v, *commit_args(), pools={"k": k, "v": v, "spare": other}, analysis_only=True
    )
    assert report.clones and report.unreceived_pools == ["spare"]
    k2, v2 = pools_split()
    report = analyze_pool_clones(op_commit_late_read, k2, v2, *commit_args(), pools={"k": k2}, analysis_only=True)
    assert report.clones == [] and [(c.arg, c.pool) for c in report.other_clones] == [("v_pool", None)]
    assert not report.clean and not report.check_passed


def _two_layer_loop(calls_on_layer0: int) -> list[tuple[str, str | None]]:
    layers = [pools_split() for _ in range(2)]
    pools = {f"layer{i}.{n}": t for i, kv in enumerate(layers) for n, t in zip("kv", kv)}
    _, slots, window = commit_args()
    chunks = [chunk() for _ in range(calls_on_layer0 + 1)]  # kept alive: distinct storages
    check = CloneCheck(pools=pools, analysis_only=True)
    with check:
        step = check.compile(op_commit_late_read)
        for x in chunks[:-1]:
            step(*layers[0], x, slots, window)
        step(*layers[1], chunks[-1], slots, window)
    assert check.report is not None and check.report.region_calls == {0: calls_on_layer0 + 1}
    return sorted((c.arg, c.pool) for c in check.report.clones)


def test_a_layer_seen_after_300_distinct_input_signatures_is_attributed() -> None:
    assert _two_layer_loop(300) == [("v_pool", "layer0.v"), ("v_pool", "layer1.v")]


def test_a_layer_seen_after_one_call_is_attributed() -> None:
    """Twin with few signatures: the same answer (the cap was the only difference)."""
    assert _two_layer_loop(1) == [("v_pool", "layer0.v"), ("v_pool", "layer1.v")]


@pytest.mark.parametrize("fn", [op_commit_after_gather, op_commit_graph_break], ids=["one_graph", "graph_break"])
def test_dynamic_sizes_get_their_own_pool_and_bytes(fn) -> None:
    """Fused (2, N, H, D) pools: v is cloned as the whole storage; 64 and 192 slots, one graph."""
    a, b = pools_fused(64), pools_fused(192)
    pools = {"a.k": a[0], "a.v": a[1], "b.k": b[0], "b.v": b[1]}
    check = CloneCheck(pools=pools, analysis_only=True)
    with check:
        step = check.compile(fn, dynamic=True)
        step(*a, *commit_args(64))
        step(*b, *commit_args(192))
    report = check.report
    assert report is not None
    got = sorted((c.pool, c.nbytes, c.written_bytes) for c in report.clones + report.other_clones)
    assert got == [("a.v", 2 * 64 * 16 * 4, 64 * 16 * 4), ("b.v", 2 * 192 * 16 * 4, 192 * 16 * 4)]
    assert report.errors == [] and report.unreceived_pools == []


def test_static_twin_of_the_dynamic_case_compiles_per_size_and_agrees() -> None:
    a, b = pools_fused(64), pools_fused(192)
    pools = {"a.k": a[0], "a.v": a[1], "b.k": b[0], "b.v": b[1]}
    check = CloneCheck(pools=pools, analysis_only=True)
    with check:
        step = check.compile(op_commit_after_gather, dynamic=False)
        step(*a, *commit_args(64))
        step(*b, *commit_args(192))
    assert check.report is not None
    assert sorted((c.pool, c.nbytes) for c in check.report.clones) == [("a.v", 8192), ("b.v", 24576)]


def test_symbolic_geometry_resolves_per_call() -> None:
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    geo = TensorGeometry((64, 16), (16, 1), 1024, torch.float32, exprs=((s0, 16), (16, 1), s0 * 16))
    assert geo.resolve({s0: 192}) == TensorGeometry((192, 16), (16, 1), 3072, torch.float32)
    assert geo.resolve({s0: 192}).nbytes == 192 * 16 * 4
    with pytest.raises(ValueError, match="s0"):
        geo.resolve({})
