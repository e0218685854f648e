"""Self-Forcing's rolling local window under the write check (the default ``Case``: ``check_writes`` on).

Each compiled call's graph runs eagerly first and must put back every tensor it writes, the index tensors
in each layer's ``kv_cache`` dict included: otherwise the compiled call starts from the eager run's indices
(once, with a whole-driver replay, it failed to compile: ``expand: ... 12 -> 0``). Checked here on a 2-layer stack whose 2-chunk window rolls
twice in 4 chunks: no run finding, compiled == eager, and after the case the caches and index tensors are
what ONE run leaves. Negative control: the roll of K through an op declared pure is dropped by the compiled
run, a ``lost_write`` (seen only since SDPA, tagged ``nondeterministic_seeded`` for its dropout, no longer
marks every later write as random when ``dropout_p=0``).
"""

from __future__ import annotations

import pytest
import torch
from _self_forcing_rolling import rolling_case

from compile_checks import CaseResult, run_case
from compile_checks.vocab import WriteProblem

pytestmark = pytest.mark.compile

POOLS = {"layer0.k", "layer0.v", "layer1.k", "layer1.v"}


def _eager_once(**kw):
    """A fresh, identical case run once eagerly: its outputs and the state it leaves."""
    case = rolling_case(**kw)
    return case.driver(case.fn), case.meta["kv"]


@pytest.fixture(scope="module")
def rolled() -> tuple[CaseResult, list[dict[str, torch.Tensor]]]:
    case = rolling_case()
    return run_case(case, analysis_only=True), case.meta["kv"]


def test_the_rolling_window_gates_with_the_write_check_on(rolled) -> None:
    result, _ = rolled
    assert result.case.check_writes  # the default: every compiled call was checked against its eager graph
    assert result.report.run_findings == [] and result.check_errors == [] and result.passed, result.failure_reasons()
    assert result.report.unanalysed == []
    # the copies are the roll's (a pool slice_scatter'ed with a slice of itself), every pool; the rolling chunks
    # compile to one region (torch.compile's default, dynamic=None: the recompile is dynamic) or one per chunk
    assert {c.pool for c in result.report.clones} == POOLS
    assert {c.op for c in result.report.clones} == {"aten::slice_scatter"}
    assert 1 <= len({c.region for c in result.report.clones}) <= 2
    # negative control of the copy verdict: the same case expected clean fails on them, with no other reason
    assert not result.clean
    assert not result.report.verdict.passed and not result.report.problems
    # compiled == eager, every chunk
    eager_out, _ = _eager_once()
    torch.testing.assert_close(result.output, eager_out)


def test_the_index_tensors_are_what_one_run_leaves(rolled) -> None:
    _, kv = rolled
    _, once = _eager_once()
    for got, want in zip(kv, once, strict=True):
        assert got["global_end_index"].tolist() == want["global_end_index"].tolist() == [16]
        assert got["local_end_index"].tolist() == want["local_end_index"].tolist() == [8]
        torch.testing.assert_close(got["k"], want["k"])
        torch.testing.assert_close(got["v"], want["v"])
    # negative control: a second run on unrestored state (what the compiled run got before the fix) starts
    # from the first run's indices and breaks on the chunk write, the original failure
    case = rolling_case()
    case.driver(case.fn)
    with pytest.raises(RuntimeError, match=r"expanded size of the tensor \(0\)"):
        case.driver(case.fn)


def test_a_dropped_roll_is_a_lost_write() -> None:
    result = run_case(rolling_case("rolling_dropped", drop_roll=True), analysis_only=True)
    found = {f.pool: f for f in result.report.run_findings}
    assert {str(f.kind) for f in found.values()} == {"lost_write"} and not result.passed
    k0 = found["layer0.k"]
    assert k0.kind == WriteProblem.LOST_WRITE and "sf_rolling_tests::hidden_roll" in k0.details["eager_writers"]
    assert k0.details["dim"] == 1 and k0.rows == (0, 1, 2, 3)  # the rolled tokens kept their old values
    # each layer's V (its roll still in the graph) is as eager left it: every call is compared on its own
    # inputs, so layer 1 is not blamed for what layer 0's lost roll did to its input
    assert set(found) == {"layer0.k", "layer1.k"}
