"""torch's, vLLM's and the cases' stderr is held while the CLI runs and shown when it fails (issue 18.5).

Negative controls: a failing gate shows what was held (and so would a torch that printed the
cause); ``--verbose`` streams it; without the hold (``enabled=False``) the same writes reach stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _cli_cases import ENGINE

from compile_checks.cli import main

ROOT = Path(__file__).resolve().parent.parent

# Three writers of the noise: C / fd level, Python's sys.stderr, a logging handler made beforehand.
_WRITERS = """
import logging, os, sys
from compile_checks.gate.stderr_noise import held_stderr, terminal
handler_logger = logging.getLogger("engine")
handler_logger.addHandler(logging.StreamHandler(sys.stderr))  # holds sys.stderr, as torch's and vLLM's do
with held_stderr(enabled={enabled}) as held:
    os.write(2, b"fd-level noise\\n")
    print("sys.stderr noise", file=sys.stderr)
    handler_logger.warning("logging noise")
    print("the CLI's own line", file=terminal())
held.show(failed={failed})
"""


def _run_writers(enabled: bool, failed: bool) -> str:
    code = textwrap.dedent(_WRITERS.format(enabled=enabled, failed=failed))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TORCH_LOGS", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return proc.stderr


NOISE = ("fd-level noise", "sys.stderr noise", "logging noise")


def test_a_passing_run_holds_every_writer_and_says_so_in_one_line() -> None:
    err = _run_writers(enabled=True, failed=False)
    assert "the CLI's own line" in err
    assert not any(n in err for n in NOISE), err
    assert "(3 lines of torch / vLLM stderr held: --verbose or TORCH_LOGS shows them)" in err


def test_a_failing_run_shows_everything_it_held() -> None:
    err = _run_writers(enabled=True, failed=True)
    assert all(n in err for n in NOISE), err
    assert "--- stderr of torch, vLLM and the cases during the run (3 lines) ---" in err


def test_without_the_hold_the_same_writes_reach_stderr() -> None:
    err = _run_writers(enabled=False, failed=False)
    assert all(n in err for n in NOISE) and "held" not in err, err


NOISY_ENGINE = (
    ENGINE
    + """

import os


@torch._dynamo.disable  # a graph break of the engine's own, without dynamo's warning about os.write
def say():
    os.write(2, b"engine noise at run time\\n")


def noisy_step(*args):
    say()
    return step(*args)


def noisy(expect_clean):
    case = make("noisy_split", False, expect_clean)
    return case.replace(fn=noisy_step)


def passing():
    return noisy(True)


def failing():
    return noisy(False)
"""
)


@pytest.mark.compile
@pytest.mark.parametrize("target, verbose", [("passing", False), ("failing", False), ("passing", True)])
def test_the_gate_shows_held_stderr_only_when_it_fails_or_is_asked(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, target: str, verbose: bool
) -> None:
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    (tmp_path / "engine.py").write_text(NOISY_ENGINE)
    argv = ["gate", f"{tmp_path / 'engine.py'}:{target}", "--analysis-only", "--no-progress"]
    code = main([*argv, "--verbose"] if verbose else argv)
    err = capfd.readouterr().err
    assert code == (0 if target == "passing" else 1)
    shown = "engine noise at run time" in err
    assert shown == (target == "failing" or verbose), err
    assert ("stderr held" in err) == (target == "passing" and not verbose), err
