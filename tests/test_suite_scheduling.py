"""The suite's xdist scheduling: modules with setup that outlives a test are kept on one worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from _scheduling import CROSS_MODULE_GROUPS, has_shared_setup, shared_setup_groups
from conftest import SHARED_SETUP_GROUPS, shared_setup_group

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    ("decorator", "shared"),
    [
        ('@pytest.fixture(scope="module")', True),
        ('@pytest.fixture(scope="session")', True),
        ("@functools.cache", True),
        ("@functools.lru_cache(maxsize=None)", True),
        ("@pytest.fixture", False),  # negative controls: per-test setup needs no grouping
        ('@pytest.fixture(scope="function")', False),
        ('@pytest.mark.parametrize("x", [1])', False),
    ],
)
def test_a_setup_that_outlives_a_test_is_read_from_the_source(decorator: str, shared: bool) -> None:
    assert has_shared_setup(f"import functools, pytest\n\n{decorator}\ndef f(x=None):\n    return x\n") is shared


def test_a_nested_or_class_level_function_is_not_module_setup() -> None:
    source = 'import pytest\n\nclass T:\n    @pytest.fixture(scope="class")\n    def f(self):\n        return 1\n'
    assert not has_shared_setup(source)


def test_the_suites_expensive_module_fixtures_are_grouped() -> None:
    groups = shared_setup_groups(TESTS)
    # the traced full compile of test_view_scatter_choice.py was built on both workers before
    for name in ("test_view_scatter_choice.py", "test_scan_agreement.py", "test_ranks_example.py"):
        assert name in groups
    assert "test_paged_write.py" not in groups  # no shared setup: its tests spread over both workers
    assert groups == SHARED_SETUP_GROUPS
    assert {groups[name] for name in CROSS_MODULE_GROUPS} == {"scenario_analysis", "forked_ranks"}
    # every module that launches ranks shares one worker's fork server
    launching = {
        p.name
        for p in TESTS.glob("test_*.py")
        if p.name != Path(__file__).name and any(s in p.read_text() for s in ("run_ranked(", '"engine_tp"'))
    }
    assert launching and {groups.get(name) for name in launching} == {"forked_ranks"}, launching


def test_the_scheduler_puts_a_group_in_one_unit_and_other_tests_in_their_own() -> None:
    a = shared_setup_group("tests/test_compile_checks_e2e.py::test_scenario_verdict[split]")
    b = shared_setup_group("tests/test_scenarios_cases.py::test_index_put_commit_is_caught")
    assert a == b == "scenario_analysis"
    assert shared_setup_group("tests/test_view_scatter_choice.py::test_x") == "test_view_scatter_choice"
    assert shared_setup_group("tests/test_paged_write.py::test_x") is None
