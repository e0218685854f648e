"""The fixture as a user's suite uses it with ``Case``s, the marker, the option and the session form.

The user's tests run in-process with pytester (Inductor is already warm); some are written to
fail, and the outcome counts and failure messages are what this file checks.
"""

from __future__ import annotations

import re
from pathlib import Path

import ar_paging  # noqa: F401  # before pytester snapshots sys.modules: vLLM registers its opaque types once per process
import pytest

pytest_plugins = ["pytester"]

USER_CASES = '''
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
    assert result.clean and result.passed and result.analysis_only


def test_fused_negative_control_passes(pool_clone_check):
    result = pool_clone_check.check(case("fused", False))
    assert not result.clean and result.passed


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
'''

USER_MODES = '''
import pytest

pytestmark = pytest.mark.compile_checks(analysis_only=True)


def test_module_marker(pool_clone_check):
    assert pool_clone_check.analysis_only is True


@pytest.mark.compile_checks(analysis_only=False)
def test_closest_marker_wins(pool_clone_check):
    assert pool_clone_check.analysis_only is False
'''

USER_OPTION = '''
def test_default_mode(pool_clone_check):
    print("ANALYSIS_ONLY", pool_clone_check.analysis_only)
'''


@pytest.mark.compile
def test_cases_marker_and_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_CASES)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=5, failed=3, errors=1)
    out = result.stdout.str()
    failed = {line.split("::")[1].split(" ")[0] for line in out.splitlines() if line.startswith("FAILED")}
    assert failed == {"test_fused_expected_clean_fails", "test_split_as_negative_control_fails", "test_session_fused_fails"}
    assert "case 'fused': expected no pool clones, but the check found some" in out
    assert "ar_paging::paged_write argument 'v_pool' (pool layer0.v)" in out
    assert "case 'split' is a negative control (expect_clean=False) but came out clean" in out
    assert "session: expected no pool clones" in out
    assert "unknown argument(s) bogus" in out
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
