"""Loading the pytest plugin must not import torch: an unrelated test suite pays nothing for it.

Each run is a fresh ``python -m pytest`` in a folder outside the repo (so the repo's conftest,
which imports torch, is not loaded) on one test that has nothing to do with compiling. A
conftest there records, at the very end of the session, whether torch was imported, whether
the plugin was loaded and whether its marker was registered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

UNRELATED_TEST = """
def test_unrelated():
    assert sum(range(4)) == 6
"""

PROBE_CONFTEST = """
import json, os, sys

def pytest_unconfigure(config):
    markers = config.getini("markers")
    with open(os.environ["PLUGIN_PROBE"], "w") as f:
        json.dump({
            "torch": "torch" in sys.modules,
            "plugin": "compile_checks.gate.plugin" in sys.modules,
            "marker": any(m.startswith("compile_checks(") for m in markers),
            "option": config.getoption("--compile-checks-analysis-only", default=None) is not None,
        }, f)
"""

# What the plugin looked like before issue 7: torch imported at module level.
TORCH_AT_LOAD_PLUGIN = """
import pytest
import torch  # noqa: F401

@pytest.fixture
def pool_clone_check():
    return None
"""


def _run_pytest(folder: Path, *args: str, autoload: bool) -> tuple[dict[str, bool], float]:
    probe = folder / "probe.json"
    env = {**os.environ, "PLUGIN_PROBE": str(probe), "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    env.pop("PYTEST_ADDOPTS", None)
    if autoload:
        env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    else:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "test_unrelated.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(probe.read_text()), elapsed


@pytest.fixture
def unrelated_suite(tmp_path: Path) -> Path:
    (tmp_path / "test_unrelated.py").write_text(UNRELATED_TEST)
    (tmp_path / "conftest.py").write_text(PROBE_CONFTEST)
    (tmp_path / "torch_at_load_plugin.py").write_text(TORCH_AT_LOAD_PLUGIN)
    return tmp_path


def test_loading_the_plugin_does_not_import_torch(unrelated_suite: Path, record_property) -> None:
    bare, t_bare = _run_pytest(unrelated_suite, autoload=False)
    loaded, t_plugin = _run_pytest(unrelated_suite, "-p", "compile_checks.gate.plugin", autoload=False)
    assert not bare["plugin"] and not bare["torch"]
    assert loaded["plugin"] and loaded["marker"] and loaded["option"]
    assert not loaded["torch"], "loading compile_checks.gate.plugin imported torch"
    record_property("seconds_without_plugin", round(t_bare, 2))
    record_property("seconds_with_plugin", round(t_plugin, 2))


def test_entry_point_autoload_does_not_import_torch(unrelated_suite: Path) -> None:
    """As an installed user gets it: the pytest11 entry point loads the plugin by itself."""
    probe, _ = _run_pytest(unrelated_suite, autoload=True)
    assert probe["plugin"] and probe["marker"], "the pytest11 entry point did not load compile_checks.gate.plugin"
    assert not probe["torch"]


def test_probe_sees_a_plugin_that_imports_torch(unrelated_suite: Path, record_property) -> None:
    """Negative control: a plugin importing torch at load (the old one did) is caught, and costs time."""
    probe, t_torch = _run_pytest(unrelated_suite, "-p", "torch_at_load_plugin", autoload=False)
    assert probe["torch"]
    record_property("seconds_with_torch_at_load", round(t_torch, 2))
