"""Issue 8 items 1 and 5: every whole-buffer copy of a pool, whatever writes it; no false clones.

Item 1: a commit written with plain ATen ops (``k[slots] = x``) that the reinplace pass
leaves functional copies the whole pool; the check must report it like a custom-op clone.
Item 5: the user's own ``k.clone()`` copies are not functionalization clones of ``k``.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.fx
from _soundness_steps import (
    aten_args,
    aten_commit_after_gather,
    aten_commit_only,
    aten_slice_copy_after_gather,
    chunk,
    commit_args,
    op_commit_late_read,
    pools_split,
    users_own_copies_then_commit,
)

from compile_checks.api import analyze_pool_clones
from compile_checks.check.graph.aten_writes import find_aten_write_copies

pytestmark = pytest.mark.compile

POOL_BYTES = 64 * 2 * 8 * 4


def _check(fn, *args, pools):
    return analyze_pool_clones(fn, *args, pools=pools, analysis_only=True)


def test_index_put_commit_after_the_window_gather_copies_both_pools() -> None:
    k, v = pools_split()
    report = _check(aten_commit_after_gather, k, v, *aten_args(), pools={"k": k, "v": v})
    got = sorted((c.kind, c.op, c.arg, c.pool, c.nbytes, c.written_bytes) for c in report.clones)
    assert got == [
        ("aten_write_copy", "aten::index_put", "self", "k", POOL_BYTES, POOL_BYTES),
        ("aten_write_copy", "aten::index_put", "self", "v", POOL_BYTES, POOL_BYTES),
    ]
    assert not report.clean and not report.check_passed
    # the pools were written all the same
    assert float(k[60:64].abs().sum()) > 0 and float(v[60:64].abs().sum()) > 0


def test_index_put_commit_with_no_later_read_is_reinplaced_and_clean() -> None:
    k, v = pools_split()
    report = _check(aten_commit_only, k, v, *aten_args(), pools={"k": k, "v": v})
    assert report.clones == [] and report.other_clones == [] and report.check_passed


def test_slice_copy_left_functional_is_one_pass_not_a_copy() -> None:
    """Issue 16 item 5: Inductor fuses the functional ``slice_scatter`` into the write-back, one
    read-modify-write pass over K with no buffer (the generated code allocates none:
    tests/test_ar_loop_counts.py); it is noted, not counted as a copy."""
    k, v = pools_split()
    report = _check(aten_slice_copy_after_gather, k, v, *aten_args(), pools={"k": k, "v": v})
    assert report.clones == [] and report.other_clones == []
    assert [n for n in report.notes if "aten::slice_scatter" in n and f"{POOL_BYTES} bytes" in n]


def _pool_loops(code: str, numel: int) -> int:
    """Loops of Inductor's C++ code that run over every element of a pool."""
    return len(re.findall(rf"for\(int64_t (\w+)=static_cast<int64_t>\(0L\); \1<static_cast<int64_t>\({numel}L\)", code))


@pytest.mark.parametrize(
    ("fn", "expected_loops"),
    [(aten_commit_after_gather, 4), (aten_commit_only, 0)],
    ids=["gather_then_write", "write_only"],
)
def test_verdict_agrees_with_inductors_generated_code(fn, expected_loops: int) -> None:
    """Full compile: a reported copy is a copy-in and a copy-back loop over the whole pool in the
    generated code (two pools: four loops); the clean twin has no pool-sized loop."""
    from torch._inductor.utils import run_and_get_code

    k, v = pools_split()
    report, codes = run_and_get_code(lambda: analyze_pool_clones(fn, k, v, *aten_args(), pools={"k": k, "v": v}))
    loops = _pool_loops("\n".join(codes), k.numel())
    assert loops == expected_loops
    assert len(report.clones) == expected_loops // 2


def test_graph_level_index_put_written_back_is_found_and_reinplaced_is_not() -> None:
    aten = torch.ops.aten
    for functional in (True, False):
        g = torch.fx.Graph()
        k, idx, x = g.placeholder("k"), g.placeholder("idx"), g.placeholder("x")
        k.meta["val"] = torch.empty(64, 16, device="meta")
        idx.meta["val"] = torch.empty(4, dtype=torch.long, device="meta")
        x.meta["val"] = torch.empty(4, 16, device="meta")
        if functional:
            put = g.call_function(aten.index_put.default, (k, [idx], x))
            put.meta["val"] = torch.empty(64, 16, device="meta")
            g.call_function(aten.copy_.default, (k, put)).meta["val"] = k.meta["val"]
        else:
            g.call_function(aten.index_put_.default, (k, [idx], x)).meta["val"] = k.meta["val"]
        g.output(None)
        sites = find_aten_write_copies(g)
        expected = [("aten::index_put", "self", "k", 64 * 16 * 4)] if functional else []
        assert [(s.op, s.arg, s.placeholder, s.clone.nbytes) for s in sites] == expected


def test_users_own_copies_are_not_reported_as_pool_clones() -> None:
    """``kc, vc = k.clone(), v.clone(); op(kc, vc); op(k, v)``: the generated code copies k and v
    once each because the user asked for it and writes the real pools in place."""
    k, v = pools_split()
    report = _check(users_own_copies_then_commit, k, v, chunk(), torch.arange(4), pools={"k": k, "v": v})
    assert report.clones == [] and report.other_clones == [] and report.check_passed
    assert float(k[:4].abs().sum()) > 0  # the real pool was written


def test_a_real_clone_is_still_reported_next_to_that_fix() -> None:
    """Negative control for the fix above: a functionalization clone of v is still found."""
    k, v = pools_split()
    report = _check(op_commit_late_read, k, v, *commit_args(), pools={"k": k, "v": v})
    assert [(c.kind, c.arg, c.pool, c.nbytes, c.written_bytes) for c in report.clones] == [
        ("functionalization_clone", "v_pool", "v", POOL_BYTES, POOL_BYTES)
    ]
