"""The CLI's exit codes and output, as a user runs it (subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compile_checks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_unknown_scenario_exits_2_and_lists_valid_names() -> None:
    p = run_cli("gate", "--scenario", "nope", "--no-progress")
    assert p.returncode == 2
    assert "unknown scenario 'nope'" in p.stderr and "split" in p.stderr and "fused" in p.stderr
    assert "Traceback" not in p.stderr


def test_usage_error_exits_2() -> None:
    p = run_cli("dump", "--scenario", "split")  # --out missing
    assert p.returncode == 2 and "--out" in p.stderr


def test_unwritable_out_dir_exits_3(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    p = run_cli("dump", "--scenario", "split", "--out", str(blocker / "sub"), timeout=60)
    assert p.returncode == 3
    assert "cannot write" in p.stderr and "Traceback" not in p.stderr


def test_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    from compile_checks.cli import main
    from compile_checks.scenarios import SCENARIOS

    assert main(["list", "--json"]) == 0  # in-process: the registry import is the whole cost
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(SCENARIOS)
    assert rows["fused"]["expect_clean"] is False and rows["split"]["in_gate"] is True


@pytest.mark.compile
def test_gate_with_a_clone_exits_1_and_dumps_an_index_per_scenario(tmp_path: Path) -> None:
    """One subprocess for the compiling path: split (clean) + fused (clone) -> exit 1."""
    dump = tmp_path / "dumps"
    p = run_cli("gate", "--scenario", "split", "--scenario", "fused", "--quick", "--json", "--no-progress", "--dump", str(dump))
    assert p.returncode == 1, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["exit_code"] == 1
    by_name = {sc["name"]: sc for sc in out["scenarios"]}
    assert by_name["split"]["clean"] is True and by_name["split"]["eager_match"] is True
    fused = by_name["fused"]
    assert fused["clean"] is False and fused["passed"] is True
    clones = fused["report"]["clones"]
    assert {c["arg"] for c in clones} == {"v_pool"} and {c["pool"] for c in clones} == {"layer0.v", "layer1.v"}
    assert all(c["nbytes"] == 2 * 64 * 16 * 2 * 32 * 4 for c in clones)
    assert all(c["graph_file"].endswith("AFTER_POST_GRAD.0.py") and c["line"] > 0 for c in clones)
    split_index = (dump / "split" / "index.md").read_text()
    assert "CLEAN" in split_index and "re-inplaced" in split_index and "CLONED" not in split_index
    fused_index = (dump / "fused" / "index.md").read_text()
    assert "CLONED" in fused_index and "clone_default" in fused_index
    for kind in ("BEFORE_PRE_GRAD", "Forward_graph", "AFTER_POST_GRAD", "kernel_0"):
        assert kind in split_index and list((dump / "split").glob(f"__compiled_fn_*{kind}*.py")), kind


@pytest.mark.compile
def test_clean_scenario_exits_0_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 0 via main() in this (already warm) process, to keep the suite short."""
    from compile_checks.cli import main

    assert main(["gate", "--scenario", "split_v1", "--analysis-only", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "split_v1" in out and "clean" in out and "exit 0" in out


def test_compile_failure_maps_to_exit_4(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import compile_checks.scenarios as scenarios
    from compile_checks.api import CompileCheckError
    from compile_checks.cli import main

    def broken(*_: object, **__: object) -> None:
        raise CompileCheckError("torch.compile of region_split failed: ValueError: boom")

    monkeypatch.setattr(scenarios, "run_scenario", broken)
    assert main(["gate", "--scenario", "split", "--no-progress"]) == 4
    err = capsys.readouterr().err
    assert "compile failed" in err and "boom" in err and "Traceback" not in err
