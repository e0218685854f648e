"""Ideal bytes derived from a compiled graph: writes of the mutating ops + reads of the gathers."""

from __future__ import annotations

import pytest
import torch

from compile_checks.case import Case, run_case
from compile_checks.reports.ideal import FinalGraphs, GraphIdeal, ideal_bytes_per_run, record_final_graphs


def _aten_commit(
    k: torch.Tensor,
    v: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slots: torch.Tensor,
    window: torch.Tensor,
) -> torch.Tensor:
    out = k.index_select(0, window).sum() + v.index_select(0, window).sum()
    k[slots] = new_k  # index_put_: an engine's plain-ATen commit
    v[slots] = new_v
    return out


@pytest.mark.compile
def test_plain_aten_commit_counts_values_written_and_window_read() -> None:
    k, v = torch.zeros(64, 2, 8), torch.zeros(64, 2, 8)
    new_k, new_v = torch.randn(4, 2, 8), torch.randn(4, 2, 8)
    case = Case(
        name="aten",
        fn=_aten_commit,
        args=(k, v, new_k, new_v, torch.arange(8, 12), torch.arange(8)),
        pools={"k": k, "v": v},
    )
    with record_final_graphs() as graphs:
        result = run_case(case, analysis_only=True)
    assert graphs.errors == []
    # writes: new_k + new_v (4 x 2 x 8 fp32 each; the long slot index is not pool data);
    # reads: two 8-slot windows of 2 x 8 fp32
    assert graphs.ideals == [GraphIdeal(write_bytes=2 * 4 * 64, read_bytes=2 * 8 * 64)]
    assert ideal_bytes_per_run(graphs, result.report.region_calls, result.report.num_regions) == (1536, "graph")
    assert torch.equal(k[8:12], new_k)  # the run really wrote the pools


def test_graph_count_mismatch_is_not_derivable_not_guessed() -> None:
    graphs = FinalGraphs(ideals=[GraphIdeal(10, 10), GraphIdeal(5, 5)])
    assert ideal_bytes_per_run(graphs, {0: 3}, num_regions=1) == (
        None,
        "not derivable: 2 final graphs for 1 compiled regions",
    )
    assert ideal_bytes_per_run(graphs, {0: 3, 1: 2}, num_regions=2) == (80, "graph")
    assert ideal_bytes_per_run(FinalGraphs(errors=["ValueError: no hint"]), {}, 0)[0] is None


def _commit_then_gather(
    k: torch.Tensor,
    v: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slots: torch.Tensor,
    window: torch.Tensor,
) -> torch.Tensor:
    torch.ops.ar_paging.paged_write(k, v, new_k, new_v, slots)  # commit first (the recommended order)
    return k.index_select(0, window).sum() + v.index_select(0, window).sum()


def _ideal_of(fused: bool) -> tuple[GraphIdeal, int]:
    import ar_paging  # noqa: F401  (registers the op)

    if fused:  # K and V as two views of one allocation: a clone of the storage survives
        kv = torch.zeros(2, 64, 2, 8)
        k, v = kv[0], kv[1]
    else:
        k, v = torch.zeros(64, 2, 8), torch.zeros(64, 2, 8)
    case = Case(
        name="fused" if fused else "split",
        fn=_commit_then_gather,
        pools={"k": k, "v": v},
        args=(k, v, torch.randn(4, 2, 8), torch.randn(4, 2, 8), torch.arange(8, 12), torch.arange(8)),
    )
    with record_final_graphs() as graphs:
        result = run_case(case, analysis_only=True)
    assert graphs.errors == [] and len(graphs.ideals) == 1
    return graphs.ideals[0], len(result.report.clones)


@pytest.mark.compile
def test_a_surviving_clone_does_not_hide_the_window_read_from_the_ideal() -> None:
    """The ideal is what the step must move whatever the layout: in the fused twin the window gathers
    after the commit read the surviving clone of the storage, and still count (they read the window
    once); the clone itself is extra. (The example engine's fused case showed 8 KiB/step against the
    split case's 12 KiB before the fix.)"""
    split, split_clones = _ideal_of(fused=False)
    fused, fused_clones = _ideal_of(fused=True)
    assert split_clones == 0 and fused_clones >= 1  # the layouts really differ (negative control)
    assert split == GraphIdeal(write_bytes=2 * 4 * 64, read_bytes=2 * 8 * 64)
    assert fused == split


# ── one traffic, four spellings: the ideal is the engine's work (window read + chunk write) ──


def _window_attend(x: torch.Tensor, kw: torch.Tensor, vw: torch.Tensor) -> torch.Tensor:
    return torch.einsum("thd,shd->thd", x, kw) + vw.sum(0)


def _op_after_gather(k, v, x, window, slots):
    out = _window_attend(x, k.index_select(0, window), v.index_select(0, window))
    torch.ops.ar_paging.paged_write(k, v, x + out, x - out, slots)
    return out


def _aten_after_gather(k, v, x, window, slots):
    out = _window_attend(x, k.index_select(0, window), v.index_select(0, window))
    k[slots] = x + out
    v[slots] = x - out
    return out


def _op_then_window_and_chunk(k, v, x, window, slots):
    torch.ops.ar_paging.paged_write(k, v, x, x * 2, slots)
    both = torch.cat([window, slots])  # the chunk is read back with the window
    return _window_attend(x, k.index_select(0, both), v.index_select(0, both))


def _aten_then_window_and_chunk(k, v, x, window, slots):
    k[slots] = x
    v[slots] = x * 2
    both = torch.cat([window, slots])
    return _window_attend(x, k.index_select(0, both), v.index_select(0, both))


SPELLINGS = (_op_after_gather, _aten_after_gather, _op_then_window_and_chunk, _aten_then_window_and_chunk)


def _report_ideal(fn: object, window_tokens: int) -> tuple[int | None, str]:
    import ar_paging  # noqa: F401  (registers the op)
    from compile_checks.reports.run import run_for_report
    from compile_checks.vocab import Mode

    k, v = torch.zeros(64, 2, 8), torch.zeros(64, 2, 8)
    args = (k, v, torch.randn(4, 2, 8), torch.arange(window_tokens), torch.arange(32, 36))
    case = Case(name=fn.__name__, fn=fn, args=args, pools={"k": k, "v": v})  # type: ignore[attr-defined]
    return run_for_report(case, Mode.ANALYSIS_ONLY).ideal


@pytest.mark.compile
def test_one_traffic_spelled_four_ways_has_one_ideal() -> None:
    """paged_write or ATen writes, before or after the window gather: the same engine work (an 8-token
    window of K and V read, a 4-token chunk of K and V written) is one ideal. Before issue 18.6 these
    were 1536, 1536, 2048 and 512 B (the chunk read back counted; a gather from an ATen-written pool
    not counted). Negative control: a 12-token window is other traffic and gets another ideal."""
    window_read, chunk_write = 2 * 8 * (2 * 8 * 4), 2 * 4 * (2 * 8 * 4)
    ideals = {fn.__name__: _report_ideal(fn, 8) for fn in SPELLINGS}
    assert set(ideals.values()) == {(window_read + chunk_write, "graph")}, ideals
    wider = {_report_ideal(fn, 12)[0] for fn in (_op_after_gather, _aten_then_window_and_chunk)}
    assert wider == {2 * 12 * (2 * 8 * 4) + chunk_write}
