"""tests/conftest.py's split between pytest-xdist's controller (no torch, no hypothesis) and where tests run."""

from __future__ import annotations

import os
from typing import Any

import pytest
from conftest import _runs_tests
from hypothesis import settings


class FakeConfig:
    """The options ``_runs_tests`` reads, as pytest-xdist has resolved them by ``pytest_configure``."""

    def __init__(self, worker: bool = False, **options: Any) -> None:
        self.options = {"dist": "no", "tx": [], "collectonly": False, **options}
        if worker:
            self.workerinput = {"workerid": "gw0"}

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)


@pytest.mark.parametrize(
    ("config", "runs"),
    [
        (FakeConfig(dist="loadgroup", tx=["popen", "popen"]), False),  # the controller of -n 2
        (FakeConfig(worker=True, dist="loadgroup", tx=["popen", "popen"]), True),  # one of its workers
        (FakeConfig(), True),  # -n 0, or pytest-xdist not loaded
        (FakeConfig(dist="loadgroup", tx=["popen", "popen"], collectonly=True), True),  # --co -n 2 collects here
    ],
    ids=["controller", "worker", "no-xdist", "collect-only"],
)
def test_only_the_controller_skips_what_tests_need(config: FakeConfig, runs: bool) -> None:
    assert _runs_tests(config) is runs  # type: ignore[arg-type]


@pytest.mark.skipif("HYPOTHESIS_PROFILE" in os.environ, reason="HYPOTHESIS_PROFILE picks another profile")
def test_the_process_running_this_test_loaded_the_ci_profile() -> None:
    assert settings.default.deadline is None and settings.default.max_examples == 60 and settings.default.derandomize
