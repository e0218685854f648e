"""Issue 16 item 3: nothing compiled is nothing checked, never "clean".

``TORCHDYNAMO_DISABLE=1``, ``torch.compiler.set_stance("force_eager")``, a driver that runs no
step, an AOTInductor package: the check saw no compiled region. It used to pass ("no surviving
pool clones in 0 compiled region(s)"), or, with pools named, fail for the wrong reason ("a stale
or rebuilt tensor?"). Each has its twin where the region is compiled and the check passes.
"""

from __future__ import annotations

import pytest
import torch
from _ar_loop_steps import evict_gather_commit, pools_split, step_args

from compile_checks.api import analyze_pool_clones, format_report
from compile_checks.case import Case, run_case

pytestmark = pytest.mark.compile

NOTHING = "no compiled region"


def _dynamo_disabled():
    return torch._dynamo.config.patch(disable=True)  # what TORCHDYNAMO_DISABLE=1 sets


def _force_eager():
    return torch.compiler.set_stance("force_eager")


@pytest.mark.parametrize("named", [True, False], ids=["pools_named", "no_pools"])
@pytest.mark.parametrize("disabled", [_dynamo_disabled, _force_eager], ids=["dynamo_disable", "force_eager"])
def test_a_disabled_compile_is_a_check_error(disabled, named: bool) -> None:
    k, v = pools_split()
    with disabled():
        report = analyze_pool_clones(
            evict_gather_commit, k, v, *step_args(), pools={"k": k, "v": v} if named else None, analysis_only=True
        )
    assert report.num_regions == 0 and not report.check_passed
    assert len(report.errors) == 1 and NOTHING in report.errors[0]
    text = format_report(report)
    assert "no surviving pool clones" not in text and "stale or rebuilt" not in text and NOTHING in text


def test_compiled_twin_passes() -> None:
    k, v = pools_split()
    report = analyze_pool_clones(evict_gather_commit, k, v, *step_args(), pools={"k": k, "v": v}, analysis_only=True)
    assert report.num_regions == 1 and report.check_passed and report.errors == []


def _case(steps: int) -> Case:
    k, v = pools_split()
    args = step_args()

    def drive(step):
        for _ in range(steps):
            step(k, v, *args)

    return Case(name=f"steps{steps}", fn=evict_gather_commit, pools={"k": k, "v": v}, driver=drive)


def test_a_driver_that_runs_no_step_fails_the_case() -> None:
    result = run_case(_case(0), analysis_only=True)
    assert not result.passed and not result.check_passed
    assert [e for e in result.report.problems if NOTHING in e]


def test_a_driver_that_runs_steps_passes() -> None:
    result = run_case(_case(2), analysis_only=True)
    assert result.passed and result.report.region_calls == {0: 2}
