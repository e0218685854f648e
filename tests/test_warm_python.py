"""tests/_warm_python.py: a forked run behaves as ``python`` would, and what could differ runs cold.

Each behaviour is compared with a cold ``subprocess.run`` of the same command; the negative controls
are the runs the guard must send cold (an environment torch reads at import, an interpreter flag)
and the one difference a warm run has (torch already imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import _warm_python as warm_python
import pytest

ROOT = Path(__file__).resolve().parent.parent

SHOW = textwrap.dedent(
    """
    import os, sys
    print(__name__, sys.argv[1:], sys.path[0] == os.path.dirname(os.path.abspath(sys.argv[0])) or sys.path[0])
    print(os.getcwd(), os.environ.get("AR_PAGING_PROBE"), "probe_mod" in sys.modules)
    import probe_mod  # from PYTHONPATH
    print(probe_mod.VALUE)
    sys.stderr.write("to stderr\\n")
    import atexit
    atexit.register(print, "at exit")
    sys.exit(int(sys.argv[1]))
    """
)


@pytest.fixture
def script(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "probe_mod.py").write_text("VALUE = 'from the path'\n")
    path = tmp_path / "show.py"
    path.write_text(SHOW)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "lib"), "AR_PAGING_PROBE": "seen"}
    return path, env


def _both(args: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    before = len(warm_python.COLD_RUNS)
    warm = warm_python.run(args, capture_output=True, text=True, timeout=120, **kwargs)
    assert len(warm_python.COLD_RUNS) == before, warm_python.COLD_RUNS[before:]  # it really ran warm
    cold = subprocess.run(args, capture_output=True, text=True, timeout=120, **kwargs)
    return warm, cold


def test_a_script_sees_what_python_gives_it(script: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, env = script
    warm, cold = _both([sys.executable, str(path), "3", "x"], env=env, cwd=tmp_path)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert warm.returncode == 3 and warm.stdout.splitlines()[-1] == "at exit" and warm.stderr == "to stderr\n"
    assert "__main__ ['3', 'x'] True" in warm.stdout and f"{tmp_path} seen False" in warm.stdout


def test_c_and_m_see_what_python_gives_them(script: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    _, env = script
    code = "import sys; print(sys.argv, repr(sys.path[0]), __name__)"
    warm, cold = _both([sys.executable, "-c", code, "a"], env=env, cwd=tmp_path)
    assert warm.stdout == cold.stdout == "['-c', 'a'] '' __main__\n"
    warm, cold = _both([sys.executable, "-m", "show", "0"], env={**env, "PYTHONPATH": f"{tmp_path}/lib"}, cwd=tmp_path)
    assert (warm.returncode, warm.stdout) == (cold.returncode, cold.stdout)
    assert warm.returncode == 0 and "at exit" in warm.stdout


def test_an_uncaught_error_is_status_1_with_python_s_traceback() -> None:
    warm, cold = _both([sys.executable, "-c", "raise ValueError('bad')"])
    assert warm.returncode == cold.returncode == 1
    assert warm.stderr == cold.stderr  # no frame of the server's in it
    with pytest.raises(subprocess.CalledProcessError):
        warm_python.run([sys.executable, "-c", "import sys; sys.exit('why')"], capture_output=True, check=True)


def test_runs_do_not_share_state(script: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    _, env = script
    first = warm_python.run(
        [sys.executable, "-c", "import probe_mod, sys; print('probe_mod' in sys.modules)"],
        env=env,
        capture_output=True,
        text=True,
    )
    second = warm_python.run(
        [sys.executable, "-c", "import sys; print('probe_mod' in sys.modules)"], env=env, capture_output=True, text=True
    )
    assert (first.stdout, second.stdout) == ("True\n", "False\n")


def test_a_hung_run_is_killed_at_its_timeout() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        warm_python.run(
            [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
            capture_output=True,
            timeout=2,
        )
    assert warm_python.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\n"


def test_torch_is_imported_already_and_the_guard_sends_what_torch_reads_cold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one difference of a warm run, and its negative controls: runs the guard must not fork."""
    code = "import sys; print('torch' in sys.modules)"
    warm = warm_python.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert warm.stdout == "True\n"  # why a test that checks torch is not imported uses subprocess.run
    before = len(warm_python.COLD_RUNS)
    torch_env = warm_python.run(
        [sys.executable, "-c", code], env={**os.environ, "TORCH_LOGS": "+dynamo"}, capture_output=True, text=True
    )
    flag = warm_python.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True)
    not_captured = warm_python.run([sys.executable, "-c", "pass"], stdout=subprocess.DEVNULL)
    monkeypatch.setenv(warm_python.WARM_ENV, "0")
    off = warm_python.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert [torch_env.stdout, flag.stdout, off.stdout] == ["False\n"] * 3 and not_captured.returncode == 0
    reasons = warm_python.COLD_RUNS[before:]
    assert (
        len(reasons) == 4 and "TORCH_LOGS" in reasons[0] and "-X" in reasons[1] and "TESTS_WARM_PYTHON=0" in reasons[3]
    )


def test_cxx_may_differ_because_what_reads_it_is_imported_only_in_the_run() -> None:
    code = "import sys; import torch._inductor.config as c; print(c.cpp.cxx[-1])"
    before = len(warm_python.COLD_RUNS)
    seen = [
        warm_python.run(
            [sys.executable, "-c", code], env={**os.environ, "CXX": cxx}, capture_output=True, text=True
        ).stdout
        for cxx in ("first-c++", "second-c++")
    ]
    assert seen == ["first-c++\n", "second-c++\n"] and len(warm_python.COLD_RUNS) == before
    gone = "import sys, _warm_python as w; print([m for m in w.NOT_PRELOADED if m in sys.modules])"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    assert warm_python.run([sys.executable, "-c", gone], env=env, capture_output=True, text=True).stdout == "[]\n"
