"""Issue 16 items 6 and 7 (run-time errors): the gate never exits 0 without checking.

``sys.exit(0)`` in a target module, a factory or a case's own code used to end the gate with
exit 0 (no table, no JUnit, even after a failing case); ``targets = []`` in
``[tool.compile_checks]`` silently ran the built-in gate. A ``ValueError`` the user's function
raises at run time was labelled "compile failed". Each is next to its twin that runs normally.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from compile_checks.cli import main
from compile_checks.gate.config import ConfigError, load_config
from tests._cli_cases import ENGINE

pytestmark = pytest.mark.compile

CASE_EXITS = (
    ENGINE
    + '''

def exiting_step(k, v, x, slots, window):
    import sys
    sys.exit(0)


def exits_in_fn():
    """A regressed case first (it must fail), then one whose code calls sys.exit(0)."""
    return [make("fused_expected_clean", True, True),
            Case(name="exits", fn=exiting_step, args=make("x", False, True).args)]


def raising_step(k, v, x, slots, window):
    raise ValueError("slots out of range")


def raises_in_fn():
    return Case(name="raises", fn=raising_step, args=make("x", False, True).args)


def interrupted_step(k, v, x, slots, window):
    raise KeyboardInterrupt


def interrupted_in_fn():
    return Case(name="interrupted", fn=interrupted_step, args=make("x", False, True).args)


def exiting_factory():
    import sys
    sys.exit(0)
'''
)


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    path = tmp_path / "engine_exits.py"
    path.write_text(CASE_EXITS)
    return path


def test_sys_exit_in_a_case_is_an_error_of_that_case(engine: Path, tmp_path: Path, capsys) -> None:
    junit = tmp_path / "j.xml"
    assert main(["gate", f"{engine}:exits_in_fn", "--junitxml", str(junit), "--no-progress"]) == 4
    out = capsys.readouterr().out
    assert "SystemExit" in out and "fused_expected_clean" in out
    cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
    assert cases["exits"].find("error") is not None and cases["fused_expected_clean"].find("failure") is not None


def test_twin_without_the_exit_reports_the_failing_case(engine: Path, capsys) -> None:
    assert main(["gate", f"{engine}:regressed", "--no-progress"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_sys_exit_in_a_factory_or_module_is_not_a_clean_exit(engine: Path, tmp_path: Path, capsys) -> None:
    assert main(["gate", f"{engine}:exiting_factory", "--no-progress"]) == 2
    assert "sys.exit(0)" in capsys.readouterr().err
    module = tmp_path / "exits_on_import.py"
    module.write_text("import sys\nsys.exit(0)\n")
    assert main(["gate", f"{module}:gate", "--no-progress"]) == 2
    assert "SystemExit" in capsys.readouterr().err


def test_keyboard_interrupt_in_a_case_exits_130(engine: Path, capsys) -> None:
    assert main(["gate", f"{engine}:interrupted_in_fn", "--no-progress"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_a_run_time_value_error_is_not_called_a_compile_failure(engine: Path, capsys) -> None:
    assert main(["gate", f"{engine}:raises_in_fn", "--no-progress"]) == 4
    out = capsys.readouterr().out
    assert "slots out of range" in out and "run failed" in out and "compile failed" not in out


def test_empty_targets_in_pyproject_is_a_usage_error(tmp_path: Path, capsys) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.compile_checks]\ntargets = []\n")
    with pytest.raises(ConfigError, match="targets is empty"):
        load_config(pyproject)
    assert main(["gate", "--config", str(pyproject), "--no-progress"]) == 2
    assert "targets is empty" in capsys.readouterr().err


def test_unset_targets_still_loads(tmp_path: Path) -> None:
    """Twin: a table without ``targets`` is valid (the built-in gate is what the user asked for)."""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.compile_checks]\npipelines = ["stock"]\n')
    config = load_config(pyproject)
    assert config is not None and config.targets == ()
