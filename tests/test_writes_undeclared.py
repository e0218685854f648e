"""Undeclared writes: an opaque op that changes a named pool while its schema declares no mutation of it.

Detected at run time around every opaque op call of every compiled graph (the analysis-only FX run
and Inductor's generated wrapper alike), by the pool's bytes, never by the op's name. Negative
control: vLLM's pattern copied by an engine (cache from a context, ``mutates_args=()``, the dummy fed
to attention): the compiled write really happens, and is reported with op, pool, rows and bytes.
Clean twin: the same write declared.
"""

from __future__ import annotations

import _writes_ops as ops
import pytest
import torch
from torch._inductor.utils import run_and_get_code

from compile_checks.api import CloneCheck
from compile_checks.case import Case, run_case
from compile_checks.check.writes.rows import changed_rows
from compile_checks.check.writes.watcher import WriteWatcher
from compile_checks.vocab import WriteProblem

SLOTS = torch.tensor([1, 3])


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    cache = torch.zeros(8, 4)
    ops.CONTEXT["cache"] = cache
    return cache, torch.ones(2, 4), torch.randn(2, 4)


def test_version_counter_misses_a_write_inside_an_op_under_a_dispatch_mode() -> None:
    """Why the watcher diffs bytes: under a TorchDispatchMode (how the watcher sees op calls) an in-place
    ATen op inside a custom op's kernel bumps no ``_version``; without a mode it does."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    cache, k, _ = _inputs()
    before = cache._version
    with Passthrough():
        ops.hidden_kv_update(k, SLOTS)
    assert cache._version == before
    assert changed_rows(torch.zeros(8, 4), cache) == [1, 3]
    ops.hidden_kv_update(k, SLOTS)
    assert cache._version > before


def test_watcher_names_the_outermost_op_and_skips_declared_aten() -> None:
    cache, k, _q = _inputs()
    with WriteWatcher({"cache": cache}) as w:
        ops.hidden_kv_update(k, SLOTS)
        cache.index_fill_(0, torch.tensor([5]), 2.0)  # declared ATen write: not an undeclared one
    assert [(x.op, x.pool, x.rows, x.declared) for x in w.writes] == [
        ("w17_tests::hidden_kv_update", "cache", (1, 3), False)
    ]
    with WriteWatcher({"cache": cache}, declared=True) as w:
        cache.index_fill_(0, torch.tensor([6]), 3.0)
    assert [(x.op, x.rows, x.declared) for x in w.writes] == [("aten::index_fill_.int_Scalar", (6,), True)]


@pytest.mark.compile
@pytest.mark.parametrize("analysis_only", [True, False])
def test_undeclared_write_in_compiled_graph(analysis_only: bool) -> None:
    cache, k, q = _inputs()
    check = CloneCheck(pools={"cache": cache}, analysis_only=analysis_only)
    with check:
        check.compile(ops.dummy_into_attention)(k, SLOTS, q)
    report = check.report
    assert cache[[1, 3]].eq(1).all(), "the compiled run really writes"
    found = [f for f in report.run_findings if f.kind == WriteProblem.UNDECLARED_WRITE]
    assert len(found) == 1, report.run_findings
    f = found[0]
    assert (f.op, f.pool, f.rows, f.nbytes, f.region) == ("w17_tests::hidden_kv_update", "cache", (1, 3), 32, 0)
    assert f.details["anchored"] is True
    assert f.details["in_generated_code"] is (None if analysis_only else True)
    assert not report.check_passed
    # the pool is reached through the op, not a graph input: no 'never received' error on top
    assert not report.errors, report.errors


@pytest.mark.compile
def test_generated_code_calls_the_hidden_op() -> None:
    """The negative control's write is in Inductor's generated code: a real write, only undeclared."""
    _cache, k, q = _inputs()
    torch._dynamo.reset()
    _, codes = run_and_get_code(torch.compile(ops.dummy_into_attention), k, SLOTS, q)
    torch._dynamo.reset()
    assert "torch.ops.w17_tests.hidden_kv_update.default" in "\n".join(codes)


@pytest.mark.compile
@pytest.mark.parametrize("analysis_only", [True, False])
def test_declared_twin_is_clean(analysis_only: bool) -> None:
    cache, k, q = _inputs()
    check = CloneCheck(pools={"cache": cache}, analysis_only=analysis_only)
    with check:
        check.compile(ops.declared_write)(cache, k, SLOTS, q)
    assert check.report.run_findings == []
    assert check.report.check_passed, check.report.problems
    assert cache[[1, 3]].eq(1).all()


@pytest.mark.compile
def test_undeclared_write_fails_a_case_both_ways() -> None:
    """A problem, not a copy: it fails a clean case and a negative control alike."""
    for expect_clean in (True, False):
        cache, k, q = _inputs()
        case = Case("u", ops.dummy_into_attention, (k, SLOTS, q), pools={"cache": cache}, expect_clean=expect_clean)
        result = run_case(case, analysis_only=True)
        assert any(
            p.startswith("undeclared_write: w17_tests::hidden_kv_update wrote pool 'cache'")
            for p in result.report.problems
        ), result.report.problems
        assert not result.passed
        assert result.report.to_dict()["run_findings"][0]["kind"] == "undeclared_write"


@pytest.mark.compile
def test_assert_no_pool_clones_names_the_undeclared_write() -> None:
    from compile_checks.api import assert_no_pool_clones

    cache, k, q = _inputs()
    with pytest.raises(AssertionError, match=r"undeclared_write: w17_tests::hidden_kv_update wrote pool 'cache'"):
        assert_no_pool_clones(ops.dummy_into_attention, k, SLOTS, q, pools={"cache": cache}, analysis_only=True)
