"""Issue 16 item 1: an in-place write in the same region must not hide a surviving pool copy.

Evict (``k[evicted] = 0``, re-inplaced to ``index_put_``), gather the window, commit, in one
region: the copy made for the commit is a clone of the ``index_put_``'s result, which *is*
the pool (``Tensor(a!)``). The walk to the graph input used to stop at that write and call
the region clean. Each bug shape has its clean twin; every verdict is held to the code plain
``torch.compile`` generates for the same function (count and bytes of pool-sized buffers).
"""

from __future__ import annotations

import pytest
import torch
import torch.fx
from _ar_loop_steps import (
    POOL_BYTES,
    evict_aten_commit,
    evict_gather_aten_commit,
    evict_gather_commit,
    evict_gather_commit_late,
    generated_copies,
    op_then_aten_commit,
    op_then_aten_commit_read_before,
    pools_split,
    reported_copies,
    step_args,
)

from compile_checks.api import analyze_pool_clones
from compile_checks.check.graph.copies import find_copy_sites
from compile_checks.check.graph.fx_helpers import view_chain_root

pytestmark = pytest.mark.compile

# fn -> the copies the check must report: (kind, op, arg, pool, bytes)
CASES = {
    evict_gather_commit_late: [("functionalization_clone", "ar_paging::paged_write", "v_pool", "v", POOL_BYTES)],
    evict_gather_commit: [],
    evict_gather_aten_commit: [("aten_write_copy", "aten::index_put", "self", "k", POOL_BYTES)],
    evict_aten_commit: [],
    op_then_aten_commit_read_before: [("functionalization_clone", "ar_paging::paged_write", "k_pool", "k", POOL_BYTES)],
    op_then_aten_commit: [],
}


def _check(fn, functionalization: str, analysis_only: bool):
    torch.manual_seed(0)
    k, v = pools_split()
    args = step_args()
    report = analyze_pool_clones(
        fn, k, v, *args, pools={"k": k, "v": v}, functionalization=functionalization, analysis_only=analysis_only
    )
    return report


def _got(report) -> list[tuple]:
    return sorted((c.kind, c.op, c.arg, c.pool, c.nbytes) for c in report.clones + report.other_clones)


@pytest.mark.parametrize("functionalization", ["v2", "v1"])
@pytest.mark.parametrize("fn", list(CASES), ids=[f.__name__ for f in CASES])
def test_verdict_equals_the_generated_code(fn, functionalization: str) -> None:
    """The copies named, and their count and bytes equal to the pool-sized buffers plain Inductor
    allocates for the same function (same functionalization, caches off)."""
    report = _check(fn, functionalization, analysis_only=True)
    assert _got(report) == CASES[fn]
    assert report.errors == [] and report.notes == []
    torch.manual_seed(0)
    k, v = pools_split()
    args = step_args()
    truth = generated_copies(fn, lambda f: f(k, v, *args), functionalization)
    assert reported_copies(report) == truth
    assert (truth == []) == (CASES[fn] == [])  # the twins really differ in the generated code


@pytest.mark.parametrize("fn", list(CASES), ids=[f.__name__ for f in CASES])
def test_full_compile_gives_the_same_verdict(fn) -> None:
    assert _got(_check(fn, "v2", analysis_only=False)) == CASES[fn]


def test_the_walk_to_the_input_goes_through_a_mutating_ops_result() -> None:
    """Graph level: ``clone(as_strided(index_put_(k, ...)))`` written back into ``k`` is a copy of
    ``k``; the same clone of a fresh tensor is not (it is no caller buffer)."""
    aten = torch.ops.aten
    for through_write in (True, False):
        g = torch.fx.Graph()
        k, idx, x = g.placeholder("k"), g.placeholder("idx"), g.placeholder("x")
        k.meta["val"] = torch.empty(64, 16, device="meta")
        idx.meta["val"] = torch.empty(4, dtype=torch.long, device="meta")
        x.meta["val"] = torch.empty(4, 16, device="meta")
        if through_write:
            src = g.call_function(aten.index_put_.default, (k, [idx], x))
        else:
            src = g.call_function(aten.empty.memory_format, ([64, 16],))
        src.meta["val"] = torch.empty(64, 16, device="meta")
        flat = g.call_function(aten.as_strided.default, (src, [1024], [1], 0))
        flat.meta["val"] = torch.empty(1024, device="meta")
        clone = g.call_function(aten.clone.default, (flat,))
        clone.meta["val"] = torch.empty(1024, device="meta")
        view = g.call_function(aten.as_strided.default, (clone, [64, 16], [16, 1], 0))
        view.meta["val"] = torch.empty(64, 16, device="meta")
        g.call_function(aten.index_put_.default, (view, [idx], x)).meta["val"] = view.meta["val"]
        g.call_function(aten.copy_.default, (k, view)).meta["val"] = k.meta["val"]
        g.output(None)
        assert view_chain_root(flat)[0] is (k if through_write else src)
        sites = find_copy_sites(g)
        assert [(s.placeholder, s.clone.nbytes) for s in sites] == ([("k", 4096)] if through_write else [])
