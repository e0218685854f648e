"""``compile-checks repro TARGET --case NAME``: one standalone file, torch only, that shows Inductor's copy.

The written file is run in a fresh interpreter: on the negative control (K/V as two halves of one
allocation, compiled regionally with dynamic shapes) it must exit non-zero naming the pool-sized buffer
the generated code allocates; on the split layout it must pass. It must not import this package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compile_checks.cli import main

TESTS = Path(__file__).resolve().parent
pytestmark = [pytest.mark.compile, pytest.mark.slow]


def _write(tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(TESTS)
    out = tmp_path / f"repro_{case}.py"
    assert main(["repro", "_repro_cases.py:cases", "--case", case, "--out", str(out)]) == 0
    text = out.read_text()
    imports = {line.split()[1] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"torch", "torch._inductor.utils"}, imports
    assert "compile_checks" not in text and len(text.splitlines()) < 200
    return out


def _run(path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of this repo on the path
    return subprocess.run(
        [sys.executable, str(path)], cwd=path.parent, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_repro_fails_on_the_fused_negative_control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = _run(_write(tmp_path, "fused", monkeypatch))
    assert done.returncode != 0, done.stdout + done.stderr
    assert "the generated code allocates [32768] bytes" in done.stderr, done.stderr[-2000:]


def test_the_repro_passes_on_the_split_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = _run(_write(tmp_path, "split", monkeypatch))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ok: no copy of a written input, compiled == eager" in done.stdout


def test_a_target_with_several_cases_needs_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(TESTS)
    assert main(["repro", "_repro_cases.py:cases", "--out", str(tmp_path / "x.py")]) == 2
    assert not (tmp_path / "x.py").exists()
