"""Lost writes: a pool the eager run wrote and the compiled run did not fails the case as ``lost_write``.

Negative controls: a KV update declared without ``(a!)`` whose dummy output is unused (AOT autograd
drops it before the post-grad graph) or only feeds a size-0 reduction (the post-grad graph keeps it,
Inductor's codegen drops it). Each is checked against Inductor's generated code. Clean twins: the
same write declared, and an ``index_copy_`` update in the graph. The eager reference run must leave
no trace: an accumulating write is applied once.
"""

from __future__ import annotations

import _writes_ops as ops
import pytest
import torch
from torch._inductor.utils import run_and_get_code

from compile_checks.case import Case, run_case
from compile_checks.vocab import WriteProblem

pytestmark = pytest.mark.compile

SLOTS = torch.tensor([1, 3])


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    cache = torch.zeros(8, 4)
    ops.CONTEXT["cache"] = cache
    return cache, torch.ones(2, 4), torch.randn(2, 4)


def _hidden_case(fn, **kw) -> tuple[Case, torch.Tensor]:
    cache, k, q = _inputs()
    return Case(fn.__name__, fn, (k, SLOTS, q), pools={"cache": cache}, driver=lambda f: f(k, SLOTS, q), **kw), cache


def _kinds(result) -> list[str]:
    return [f.kind for f in result.report.run_findings]


def _generated_code(fn, *args) -> str:
    torch._dynamo.reset()
    _, codes = run_and_get_code(torch.compile(fn), *args)
    torch._dynamo.reset()
    return "\n".join(codes)


@pytest.mark.parametrize("analysis_only", [True, False])
def test_unused_dummy_is_a_lost_write(analysis_only: bool) -> None:
    case, cache = _hidden_case(ops.dummy_unused)
    result = run_case(case, analysis_only=analysis_only)
    lost = [f for f in result.report.run_findings if f.kind == WriteProblem.LOST_WRITE]
    assert len(lost) == 1, result.report.run_findings
    f = lost[0]
    assert (f.pool, f.rows, f.op, f.nbytes) == ("cache", (1, 3), "w17_tests::hidden_kv_update", 2 * 4 * 4)
    assert f.details["unwritten_rows"] == [1, 3]
    assert "call 1 of 1: pool 'cache': dim 0 [1, 3] of [8, 4] differ" in "\n".join(result.report.problems)
    assert not result.passed
    # the compiled run really never wrote: the pool is as before, and the eager run's writes were undone
    assert not cache.ne(0).any()


@pytest.mark.slow
def test_unused_dummy_evidence_from_generated_code() -> None:
    """Inductor's generated code for the negative control calls no KV update; the clean twin's writes."""
    cache, k, q = _inputs()
    code = _generated_code(ops.dummy_unused, k, SLOTS, q)
    assert "hidden_kv_update" not in code
    assert not cache.ne(0).any()
    code = _generated_code(ops.declared_write, cache, k, SLOTS, q)
    assert "w17_tests.declared_kv_update.default" in code
    assert cache[1].eq(1).all() and cache[3].eq(1).all()


@pytest.mark.slow
def test_dropped_only_by_codegen() -> None:
    """The post-grad graph keeps the op (analysis-only runs it: no lost write there, but an unanchored
    undeclared write fails the case); Inductor's generated code has no call and full codegen loses the write."""
    case, _ = _hidden_case(ops.dummy_into_sum)
    analysed = run_case(case, analysis_only=True)
    assert WriteProblem.LOST_WRITE not in _kinds(analysed)
    undeclared = [f for f in analysed.report.run_findings if f.kind == WriteProblem.UNDECLARED_WRITE]
    assert undeclared and undeclared[0].details["anchored"] is False
    assert "codegen may drop it" in undeclared[0].message
    assert not analysed.passed

    case, _cache = _hidden_case(ops.dummy_into_sum)
    full = run_case(case, analysis_only=False)
    assert WriteProblem.LOST_WRITE in _kinds(full), full.report.run_findings
    assert not full.passed

    _, k, q = _inputs()
    assert "hidden_kv_update" in _post_grad_code(ops.dummy_into_sum, k, SLOTS, q)
    assert "hidden_kv_update" not in _generated_code(ops.dummy_into_sum, k, SLOTS, q)


def _post_grad_code(fn, *args) -> str:
    from compile_checks.api import CloneCheck

    check = CloneCheck(analysis_only=True)
    with check:
        check.compile(fn)(*args)
    return "\n".join(i.post_grad_code for r in check.probe.regions for i in r.inner)


@pytest.mark.parametrize("fn", [ops.declared_write, ops.aten_write])
@pytest.mark.parametrize("analysis_only", [True, False])
def test_clean_twins_write_and_pass(fn, analysis_only: bool) -> None:
    cache, k, q = _inputs()
    case = Case(fn.__name__, fn, (cache, k, SLOTS, q), pools={"cache": cache}, driver=lambda f: f(cache, k, SLOTS, q))
    result = run_case(case, analysis_only=analysis_only)
    assert result.report.run_findings == []
    assert result.passed, result.report.problems
    assert cache[[1, 3]].eq(1).all() and cache[[0, 2, 4, 5, 6, 7]].eq(0).all()


def test_eager_reference_is_undone() -> None:
    """The eager graph's writes are undone: an accumulating write lands once; the driver runs once."""
    cache, k, q = _inputs()
    draws = []

    def driver(f):
        draws.append(torch.rand(1).item())
        return f(cache, k, SLOTS, q)

    result = run_case(Case("acc", ops.accumulate, pools={"cache": cache}, driver=driver), analysis_only=True)
    assert result.passed, result.report.problems
    assert cache[[1, 3]].eq(1).all(), "the eager reference's write was not undone"
    assert len(draws) == 1


def test_check_writes_off_runs_the_driver_once() -> None:
    case, _ = _hidden_case(ops.dummy_unused, check_writes=False)
    calls = []
    case = case.replace(driver=lambda f, d=case.driver: calls.append(1) or d(f))
    result = run_case(case, analysis_only=True)
    assert calls == [1]
    assert WriteProblem.LOST_WRITE not in _kinds(result)


def test_verify_alone_enables_the_check() -> None:
    cache, k, q = _inputs()
    case = Case("v", ops.dummy_unused, (k, SLOTS, q), pools={"cache": cache}, verify=lambda out: (True, 0.0))
    assert WriteProblem.LOST_WRITE in _kinds(run_case(case, analysis_only=True))
    case = Case("no-verify", ops.dummy_unused, (k, SLOTS, q), pools={"cache": cache})
    assert WriteProblem.LOST_WRITE not in _kinds(run_case(case, analysis_only=True))


def test_the_driver_runs_once_with_the_compiled_step() -> None:
    """No host loop replay: the driver never gets the eager function, only the compiled one, once."""
    cache, k, q = _inputs()
    got = []

    def driver(f):
        got.append(f is ops.aten_write)
        return f(cache, k, SLOTS, q)

    result = run_case(Case("once", ops.aten_write, pools={"cache": cache}, driver=driver), analysis_only=True)
    assert got == [False] and cache[[1, 3]].eq(1).all()
    assert result.passed and result.report.errors == [], result.report.problems
