"""Issue 50: ``compile-checks init`` writes a scaffold that gates as written, and ``gate -k`` (as ``dump -k``)
runs only the cases it names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compile_checks.cli import main
from compile_checks.gate.config import load_config

pytestmark = pytest.mark.compile


def test_init_scaffold_gates_as_written_and_gate_k_selects_cases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path)]) == 0
    assert "next: cd" in capsys.readouterr().out
    config = load_config(tmp_path / "pyproject.toml")
    assert config is not None and config.targets == ("cases.py:cases",)
    monkeypatch.chdir(tmp_path)
    assert main(["gate", "--no-progress", "--json"]) == 0  # the scaffold as written: split clean, fused clones
    doc = json.loads(capsys.readouterr().out)
    got = {c["label"]: (c["clean"], c["passed"]) for c in doc["cases"]}
    assert got == {"split": (True, True), "fused": (False, True)}
    assert main(["gate", "-k", "fus*", "--no-progress", "--json"]) == 0
    assert [c["label"] for c in json.loads(capsys.readouterr().out)["cases"]] == ["fused"]
    assert main(["list", "-k", "spl"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["split"]
    assert main(["gate", "-k", "nothing", "--no-progress"]) == 2
    assert "-k nothing matches no case; the cases: split, fused" in capsys.readouterr().err


def test_init_never_overwrites_and_appends_the_table_to_a_pyproject_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "engine"\n')
    assert main(["init", str(tmp_path)]) == 0
    text = (tmp_path / "pyproject.toml").read_text()
    assert text.startswith('[project]\nname = "engine"\n') and "[tool.compile_checks]" in text
    capsys.readouterr()
    assert main(["init", str(tmp_path)]) == 2
    assert "cases.py exists; --force overwrites it" in capsys.readouterr().err
    assert main(["init", str(tmp_path), "--force"]) == 0
    assert "already has a [tool.compile_checks] table" in capsys.readouterr().out
    assert (tmp_path / "pyproject.toml").read_text() == text


def test_scan_import_finds_a_module_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The console script's sys.path starts at its own folder, not the working directory: ``--import myops``
    must still find ./myops.py (and, when it is nowhere, say where it looked)."""
    import sys

    (tmp_path / "myops_issue50.py").write_text("LOADED = True\n")
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "myops_issue50", raising=False)
    main(["scan", "empty", "--import", "myops_issue50"])  # an empty folder: no trace, a usage error after it
    assert getattr(sys.modules.get("myops_issue50"), "LOADED", False)
    capsys.readouterr()
    assert main(["scan", "empty", "--import", "no_such_module_issue50"]) == 2
    assert f"looked in the working directory {tmp_path}" in capsys.readouterr().err
