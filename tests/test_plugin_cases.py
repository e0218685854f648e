"""The fixture as a user's suite uses it with ``Case``s, the marker, the option and the session form.

The user's tests run in-process with pytester (Inductor is already warm); some are written to
fail, and the outcome counts and failure messages are what this file checks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import ar_paging  # noqa: F401  # before pytester snapshots sys.modules: vLLM registers its opaque types once per process
from compile_checks.case import Case, CaseResult
from compile_checks.check.findings import CloneReport, SurvivingClone

pytest_plugins = ["pytester"]

USER_CASES = """
import pytest
import torch
import ar_paging  # noqa: F401
from compile_checks import Case

pytestmark = pytest.mark.compile_checks(analysis_only=True)


def step(k, v, x, slots):
    torch.ops.ar_paging.paged_write(k, v, x, x, slots)
    return k.sum()


def split_pools():
    return torch.zeros(64, 2, 8), torch.zeros(64, 2, 8)


def fused_pools():
    kv = torch.zeros(2, 64, 2, 8)
    return kv[0], kv[1]


def case(layout, expect_clean):
    k, v = split_pools() if layout == "split" else fused_pools()
    return Case(layout, step, args=(k, v, torch.ones(4, 2, 8), torch.arange(4)),
                pools={"layer0.k": k, "layer0.v": v}, expect_clean=expect_clean)


def loop(pool_clone_check, k, v, **session_kwargs):
    with pool_clone_check.session(pools={"layer0.k": k, "layer0.v": v}, **session_kwargs) as s:
        compiled = s.compile(step)
        for chunk in range(3):  # the host loop: one commit per chunk, same compiled region
            compiled(k, v, torch.full((4, 2, 8), float(chunk + 1)), torch.arange(4 * chunk, 4 * chunk + 4))
    return s


def test_split_clean(pool_clone_check):
    result = pool_clone_check.check(case("split", True))
    assert result.check_passed and result.passed and result.analysis_only
    # the gate's --json / JUnit vocabulary on the Python result
    assert result.clean is True and result.expect_clean is True and result.pipeline == "stock"
    assert result.verdict_met and result.check_errors == [] and result.eager_match is None


def test_fused_negative_control_passes(pool_clone_check):
    result = pool_clone_check.check(case("fused", False))
    assert not result.check_passed and result.passed
    assert result.clean is False and result.expect_clean is False  # the negative control of `clean`


def test_fused_expected_clean_fails(pool_clone_check):
    pool_clone_check.check(case("fused", True))


def test_split_as_negative_control_fails(pool_clone_check):
    pool_clone_check.check(case("split", False))


def test_session_host_loop_clean(pool_clone_check):
    k, v = split_pools()
    s = loop(pool_clone_check, k, v)
    assert s.report.clean and float(k[:12].sum()) == (1 + 2 + 3) * 4 * 16


def test_session_fused_fails(pool_clone_check):
    loop(pool_clone_check, *fused_pools())


def test_session_fused_negative_control_passes(pool_clone_check):
    s = loop(pool_clone_check, *fused_pools(), expect_clean=False)
    assert not s.report.clean


@pytest.mark.compile_checks(bogus=1)
def test_bad_marker(pool_clone_check):
    pass


def test_check_rejects_a_non_case(pool_clone_check):
    with pytest.raises(ValueError, match="case must be a compile_checks.Case"):
        pool_clone_check.check(step)
"""

USER_MODES = """
import pytest

pytestmark = pytest.mark.compile_checks(analysis_only=True)


def test_module_marker(pool_clone_check):
    assert pool_clone_check.analysis_only is True


@pytest.mark.compile_checks(analysis_only=False)
def test_closest_marker_wins(pool_clone_check):
    assert pool_clone_check.analysis_only is False
"""

USER_OPTION = """
def test_default_mode(pool_clone_check):
    print("ANALYSIS_ONLY", pool_clone_check.analysis_only)
"""


def _noop() -> None:
    """A case's fn for results built by hand (nothing is compiled)."""


def _copy(pool: str = "layer0.v") -> SurvivingClone:
    return SurvivingClone(
        op="ar_paging::paged_write",
        arg="v_pool",
        nbytes=4096,
        shape=(64, 2, 8),
        dtype=torch.float32,
        pool=pool,
        node="clone_default",
    )


def _old_case_failure_first_line(result: CaseResult) -> str:
    """The plugin's message before issue 15: it keyed on ``check_passed`` (no copies AND no problems)."""
    if result.check_passed != result.case.expect_clean:
        if result.case.expect_clean:
            return f"case {result.case.name!r}: expected no pool clones, but the check found some"
        return f"case {result.case.name!r} is a negative control (expect_clean=False) but came out clean"
    return f"case {result.case.name!r}: the check could not decide"


def test_a_check_error_without_copies_is_reported_as_a_check_error() -> None:
    from compile_checks.gate.plugin import _case_failure

    report = CloneReport(num_regions=1, errors=["named pool 'layer0.k' was never received"])
    result = CaseResult(case=Case("split", _noop, expect_clean=True), report=report)
    # negative control: the old rule calls this error a clone the check "found"
    assert _old_case_failure_first_line(result).endswith("expected no pool clones, but the check found some")
    message = _case_failure(result)
    assert message.startswith("case 'split': the check could not decide: named pool 'layer0.k' was never received")
    assert "survive reinplacing" not in message and "found some" not in message
    # the twin: a real copy and no error is named as the copy, not as a check error
    copied = _case_failure(CaseResult(case=Case("fused", _noop), report=CloneReport(clones=[_copy()], num_regions=1)))
    assert copied.startswith("case 'fused': 1 pool clone(s) survive reinplacing") and "could not decide" not in copied
    assert "ar_paging::paged_write argument 'v_pool' (pool layer0.v)" in copied


@pytest.mark.parametrize(
    ("expect_clean", "clones", "errors", "eager_match", "reason"),
    [
        (True, [], ["an unresolvable size"], None, "the check could not decide: an unresolvable size"),
        (True, [_copy()], [], None, "1 pool clone(s) survive reinplacing: ar_paging::paged_write argument 'v_pool'"),
        (False, [], [], None, "negative control stopped cloning: expected a surviving pool clone, found none"),
        (True, [], [], False, "compiled != eager (max absolute diff 0.5)"),
    ],
)
def test_plugin_junit_and_table_give_one_reason(expect_clean, clones, errors, eager_match, reason) -> None:
    """The in-process result and the gate's plain outcome decide and word a failure alike."""
    from compile_checks.gate.junit import failure_message
    from compile_checks.gate.outcome import outcome_from_result
    from compile_checks.gate.plan import TARGET, CaseSource, PlannedCase

    case = Case("c", _noop, expect_clean=expect_clean)
    result = CaseResult(
        case=case,
        report=CloneReport(clones=clones, errors=errors, num_regions=1),
        eager_match=eager_match,
        max_abs_diff=0.5 if eager_match is False else None,
    )
    planned = PlannedCase(CaseSource(TARGET, "x.py:c"), "c", "c", case.pipeline, expect_clean, True)
    outcome = outcome_from_result(planned, result)
    assert not result.passed and not outcome.passed and result.verdict_met == outcome.verdict_met
    assert result.failure_reasons() == outcome.failure_reasons() and result.failure_reasons()[0].startswith(reason)
    assert failure_message(outcome) == " | ".join(result.failure_reasons())
    # the clean twin: nothing to report
    twin = CaseResult(case=Case("c", _noop), report=CloneReport(num_regions=1), eager_match=True)
    planned = PlannedCase(planned.source, "c", "c", case.pipeline, True, True)
    assert twin.passed and twin.failure_reasons() == [] and failure_message(outcome_from_result(planned, twin)) is None


@pytest.mark.compile
def test_cases_marker_and_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_CASES)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=5, failed=3, errors=1)
    out = result.stdout.str()
    failed = {line.split("::")[1].split(" ")[0] for line in out.splitlines() if line.startswith("FAILED")}
    assert failed == {
        "test_fused_expected_clean_fails",
        "test_split_as_negative_control_fails",
        "test_session_fused_fails",
    }
    assert "case 'fused': 1 pool clone(s) survive reinplacing" in out
    assert "ar_paging::paged_write argument 'v_pool' (pool layer0.v)" in out
    assert "case 'split': negative control stopped cloning: expected a surviving pool clone, found none" in out
    assert "case 'session': 1 pool clone(s) survive reinplacing" in out
    assert "unknown argument(s) bogus" in out
    # a failure reads as the verdict: the test's own line, not the plugin's frames and their CloneReport reprs
    assert "CloneReport(" not in out and "compile_checks/gate/plugin.py" not in out
    assert "test_user.py:" in out  # the frame that stays: the user's test
    kept = set(re.findall(r"dumps kept at (/\S+)", out))
    assert len(kept) == 3 and all(Path(d, "index.md").is_file() for d in kept)


def test_marker_sets_the_mode_and_closest_wins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_modes=USER_MODES)
    pytester.runpytest("-p", "no:cacheprovider", "-q", "--strict-markers").assert_outcomes(passed=2)


@pytest.mark.parametrize(("option", "expected"), [((), "False"), (("--compile-checks-analysis-only",), "True")])
def test_option_sets_the_default_mode(pytester: pytest.Pytester, option: tuple[str, ...], expected: str) -> None:
    pytester.makepyfile(test_option=USER_OPTION)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "-s", *option)
    result.assert_outcomes(passed=1)
    assert f"ANALYSIS_ONLY {expected}" in result.stdout.str()
