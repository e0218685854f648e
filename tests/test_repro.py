"""``compile-checks repro TARGET --case NAME``: one standalone file, torch only, that shows Inductor's copy.

The written file is run in a fresh interpreter: on the negative control (K/V as two halves of one
allocation, compiled regionally with dynamic shapes) it must exit non-zero naming the pool-sized buffer
the generated code allocates; on the split layout it must pass. It must not import this package.

Its expectation is the gate's verdict, and it compiles with the case's settings (``settings_cases``): a v1
case copies in the file too (its v2 twin does not), a clean case that writes an 8-byte counter is ok, pools
carved from one byte arena in two dtypes are reproduced, and a lost write it cannot reproduce says so.
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


def _write(tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch, target: str = "cases") -> Path:
    monkeypatch.chdir(TESTS)
    out = tmp_path / f"repro_{case}.py"
    assert main(["repro", f"_repro_cases.py:{target}", "--case", case, "--out", str(out)]) == 0
    text = out.read_text()
    imports = {line.split()[1] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"torch", "sys"}, imports
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
    assert "ok: the gate found no copy and no failing finding in this region, and compiled == eager" in done.stdout


def test_a_target_with_several_cases_needs_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(TESTS)
    assert main(["repro", "_repro_cases.py:cases", "--out", str(tmp_path / "x.py")]) == 2
    assert not (tmp_path / "x.py").exists()


@pytest.mark.parametrize(
    ("case", "code", "says"),
    [
        # v1 (the case's functionalization): the two views of the one input are cloned, as the gate found
        ("fused_kv_v1", 1, "the generated code allocates [4096, 8192] bytes every call: the copy the gate found"),
        ("fused_kv_v2", 0, "ok: the gate found no copy"),  # the same graph under v2: the negative control
        # clean, and it writes an 8-byte counter: no "copy of a written input" of its own making
        ("counter", 0, "ok: the gate found no copy"),
        # K (fp32) and V (fp16) carved from one byte arena: built as they are (no setStorage out of bounds)
        ("arena", 1, "the generated code allocates [8192] bytes every call: the copy the gate found"),
        # the gate's lost_write: the stand-in op writes only declared arguments; the file says so, never "ok"
        ("lost", 2, "NOT REPRODUCED: the gate found lost_write on pool 'k' (repro_test::commit_undeclared)"),
    ],
)
def test_the_repro_compiles_as_the_case_and_expects_the_gates_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: str, code: int, says: str
) -> None:
    path = _write(tmp_path, case, monkeypatch, target="settings_cases")
    text, err = path.read_text(), capsys.readouterr().err
    assert f"'enable_auto_functionalized_v2': {case != 'fused_kv_v1'}" in text
    if case == "lost":  # said in the file and by the command, before the file runs
        assert "cannot reproduce lost_write on pool 'k'" in err and "What this file cannot reproduce:" in text
    done = _run(path)
    assert done.returncode == code, done.stdout + done.stderr[-3000:]
    assert says in done.stdout + done.stderr, done.stdout + done.stderr[-3000:]
