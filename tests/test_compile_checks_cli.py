"""The CLI's usage paths and exit codes that need no compile: fast, mostly in-process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compile_checks.cli import main
from tests._cli_cases import write_engine

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_help_and_usage_errors_do_not_import_torch() -> None:
    p = _python(
        "import sys\n"
        "from compile_checks.cli import main\n"
        "codes = [main(['--help']), main(['gate', '--jobs', '0']), main(['gate', '--pipeline', 'nope']),\n"
        "         main(['gate', '--full', '--analysis-only'])]\n"
        "print(codes, 'torch' in sys.modules)\n"
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[0, 2, 2, 2] False"
    assert "--jobs must be at least 1" in p.stderr and "invalid choice: 'nope'" in p.stderr


@pytest.mark.parametrize("argv", [["--scenario", "no_such", "gate"], ["gate", "--scenario", "no_such"]])
def test_unknown_scenario_exits_2_before_or_after_the_subcommand(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # before the fix, options before the subcommand were dropped: this ran the default gate, exit 0
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "unknown scenario 'no_such'" in err and "split" in err and "Traceback" not in err


def test_dump_usage_error_does_not_create_the_out_dir(tmp_path: Path) -> None:
    out = tmp_path / "dumps"
    assert main(["dump", "--scenario", "no_such", "--out", str(out)]) == 2
    assert not out.exists()
    assert main(["dump", "--scenario", "split"]) == 2  # --out missing


def test_the_mode_is_resolved_once_the_command_line_over_the_table(tmp_path: Path) -> None:
    from compile_checks.cli import _gate_mode, resolve_mode
    from compile_checks.cli_parser import merged as _merge
    from compile_checks.cli_parser import parser as _parser
    from compile_checks.errors import UsageError
    from compile_checks.gate.config import GateConfig
    from compile_checks.vocab import Mode

    assert resolve_mode(None, None, Mode.ANALYSIS) is Mode.ANALYSIS
    assert resolve_mode(True, None, Mode.ANALYSIS) is Mode.FULL
    assert resolve_mode(None, True, Mode.FULL) is Mode.ANALYSIS_ONLY
    with pytest.raises(UsageError, match="contradict"):
        resolve_mode(True, True, Mode.ANALYSIS)
    table_full = GateConfig.from_table(tmp_path / "pyproject.toml", {"full": True})

    def mode(argv: list[str], config: GateConfig | None) -> Mode:
        args = _merge(_parser().parse_args(argv))
        return _gate_mode(args, args.command or "gate", config)

    assert mode(["gate"], None) is Mode.ANALYSIS and mode(["gate"], table_full) is Mode.FULL
    assert mode(["gate", "--analysis-only"], table_full) is Mode.ANALYSIS_ONLY
    assert mode(["list"], table_full) is Mode.FULL and mode(["dump", "--out", "d"], None) is Mode.FULL
    assert Mode.ANALYSIS.codegen_smoke and not Mode.ANALYSIS_ONLY.codegen_smoke and not Mode.FULL.analysis_only


def test_dump_refuses_analysis_only_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dumps"
    assert main(["dump", "--scenario", "split", "--out", str(out), "--analysis-only"]) == 2
    assert "--analysis-only" in capsys.readouterr().err and not out.exists()


def test_options_merge_across_levels() -> None:
    from compile_checks.cli_parser import merged as _merge
    from compile_checks.cli_parser import parser as _parser

    args = _merge(
        _parser().parse_args(["--pipeline", "stock", "--json", "gate", "--pipeline", "vllm", "--jobs", "2", "t.py:X"])
    )
    assert args.pipeline == ["stock", "vllm"] and args.json is True and args.jobs == 2 and args.targets == ["t.py:X"]


def test_bad_target_and_bad_config_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = write_engine(tmp_path)
    assert main(["gate", f"{engine}:no_such_name"]) == 2
    assert "has no attribute 'no_such_name'" in capsys.readouterr().err
    assert main(["gate", "not_a_target"]) == 2
    (tmp_path / "pyproject.toml").write_text('[tool.compile_checks]\ntarget = ["engine.py:gate"]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["gate"]) == 2
    err = capsys.readouterr().err
    assert "unknown key(s) in [tool.compile_checks]: target" in err
    (tmp_path / "pyproject.toml").write_text('[tool.compile_checks]\nfull = "yes"\n')
    assert main(["gate"]) == 2 and "full must be a bool" in capsys.readouterr().err


def test_unwritable_junit_path_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = write_engine(tmp_path)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["gate", f"{engine}:SPLIT_INSTANCE", "--junitxml", str(blocker / "junit.xml")]) == 3
    err = capsys.readouterr().err
    assert "cannot write" in err and f"--junitxml {blocker / 'junit.xml'}:" in err  # the file, not only its folder


def test_a_missing_junit_folder_is_created_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from compile_checks.gate.commands import check_writable_file

    check_writable_file(tmp_path / "new" / "junit.xml")
    assert (tmp_path / "new").is_dir()
    assert f"created its missing folder {tmp_path / 'new'}" in capsys.readouterr().err
    check_writable_file(tmp_path / "new" / "again.xml")  # the negative control: a folder that exists is not news
    assert capsys.readouterr().err == ""


def test_pipeline_choices_are_plain_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", "--pipeline", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert "(choose from 'stock', 'vllm', 'vllm-piecewise')" in err and "<Pipeline" not in err
    assert main(["list", "--pipeline", "vllm-piecewise", "--scenario", "split"]) == 0  # a valid name still parses


TWICE = """
import torch
from compile_checks import Case


def step(k, x):
    k.add_(x)
    return k.sum()


def twice():
    k = torch.zeros(8)
    return Case("twice", step, args=(k, torch.ones(8)), pools={"a": k, "b": k})
"""


def test_a_pool_named_twice_is_a_usage_error_as_a_target_typo_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "twice.py").write_text(TWICE)
    junit = tmp_path / "j.xml"
    assert main(["gate", f"{tmp_path / 'twice.py'}:twice", "--no-progress", "--junitxml", str(junit)]) == 2
    assert "pool 'b' is the same tensor as pool 'a'" in capsys.readouterr().out
    import xml.etree.ElementTree as ET

    (error,) = ET.parse(junit).getroot().iter("error")
    assert error.get("type") == "usage"
    assert main(["gate", f"{tmp_path / 'twice.py'}:no_such_*"]) == 2  # the user's naming again: the same code


def test_compile_failure_maps_to_exit_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import compile_checks.gate.one_case as one_case
    from compile_checks.api import CompileCheckError

    def broken(*_: object, **__: object) -> None:
        raise CompileCheckError("torch.compile of step failed: ValueError: boom")

    monkeypatch.setattr(one_case, "run_case", broken)
    engine = write_engine(tmp_path)
    junit = tmp_path / "j.xml"
    assert main(["gate", f"{engine}:gate", "--junitxml", str(junit), "--no-progress"]) == 4
    out = capsys.readouterr().out
    assert "compile failed" in out and "boom" in out and "ERROR" in out
    import xml.etree.ElementTree as ET

    errors = [tc.find("error") for tc in ET.parse(junit).getroot().iter("testcase")]
    assert len(errors) == 2 and all(e is not None and "boom" in e.get("message", "") for e in errors)


def test_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    from compile_checks.scenarios import SCENARIOS

    assert main(["--json", "list"]) == 0  # a global option before the subcommand
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(SCENARIOS)
    assert rows["fused"]["expect_clean"] is False and rows["split"]["in_gate"] is True
    assert main(["list", "--junitxml", "x.xml"]) == 2


@pytest.mark.slow
def test_list_into_a_closed_pipe_exits_0() -> None:
    """``compile-checks list | head``: the reader is gone before the first write (was exit 4)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "compile_checks", "list"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # closed before the child writes anything (its imports take seconds)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "BrokenPipe" not in err and "Traceback" not in err


def test_report_without_the_reports_package_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the import fails as if not installed (whether or not an earlier test in this worker imported it)
    for name in ("compile_checks.reports", "compile_checks.reports.command"):
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["report", "--help"]) == 2
    assert "compile_checks.reports" in capsys.readouterr().err


def test_list_shows_the_cases_a_target_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = write_engine(tmp_path)
    assert main(["list", f"{engine}:gate", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["mode"], r["expect_clean"]) for r in rows] == [
        ("split_step", "analysis", True),
        ("fused_control", "analysis", False),
    ]
