"""``python -c CODE`` / ``-m MODULE`` / ``SCRIPT`` for tests, forked from a server that imported torch once.

A test that needs a fresh interpreter (an import-time switch, "does not import vLLM", the README's
script) paid ``import torch`` (~1.7 s of CPU) per run. ``run`` forks the child from a per-process
server (started at the first warm run) that has imported torch and nothing of this project or vLLM,
and runs the command there as ``python`` would: ``sys.argv``, ``sys.path[0]``, ``PYTHONPATH``, the
environment, the working folder, ``__main__``, exit status, atexit. The one difference a test can see:
``torch`` (and what it imports) is already in ``sys.modules``. So a test that checks torch is *not*
imported calls ``subprocess.run``, never this.

The server imported torch under its own environment: a run whose environment differs from it in
anything torch could read at import (any variable outside ``WARM_SAFE_ENV_PREFIXES`` /
``WARM_SAFE_ENV_KEYS``) runs cold, through
``subprocess.run``, and is counted in ``COLD_RUNS`` with the reason; so does anything but
``capture_output=True`` or an interpreter flag. ``TESTS_WARM_PYTHON=0`` runs everything cold.

The server: ``python tests/_warm_python.py --serve``, one JSON line per request on stdin, answers
``{"pid": N}`` then ``{"returncode": N}`` on its stdout (torch's own output goes to /dev/null).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WARM_ENV = "TESTS_WARM_PYTHON"
# read by this project or vLLM (neither imported by the server), or by this helper: may differ per run;
# CXX: read by torch._inductor.config / cpp_builder and torch.utils.cpp_extension, never imported by
# `import torch` (the server refuses to start if they were: NOT_PRELOADED)
WARM_SAFE_ENV_PREFIXES = ("AR_PAGING_", "COMPILE_CHECKS_", "VLLM_", "TESTS_", "PYTEST_")
WARM_SAFE_ENV_KEYS = frozenset({"PYTHONPATH", "CXX"})
NOT_PRELOADED = ("torch._inductor.config", "torch._inductor.cpp_builder", "torch.utils.cpp_extension")
COLD_RUNS: list[str] = []  # why each cold run was cold (test_warm_python checks the guard with it)


def _safe(key: str) -> bool:
    return key in WARM_SAFE_ENV_KEYS or key.startswith(WARM_SAFE_ENV_PREFIXES)


class _Server:
    """One ``--serve`` process and a byte buffer over its answers."""

    def __init__(self) -> None:
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # sys.path is set per run
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
        )
        self._buf = b""
        ready = self.answer(time.monotonic() + 300)
        if ready.get("ready") is not True:
            raise RuntimeError(f"tests/_warm_python.py --serve did not start: {ready}")

    def answer(self, deadline: float | None) -> dict[str, Any]:
        """The server's next JSON line; ``{}`` when ``deadline`` passes first."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], wait)[0]:
                return {}
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the warm python server exited ({self.proc.wait()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_server: _Server | None = None


def _cold_reason(args: list[str], env: dict[str, str], server_env: dict[str, str] | None, kwargs: dict) -> str | None:
    """Why this run cannot be forked from the server (None: it can)."""
    if os.environ.get(WARM_ENV) == "0":
        return f"{WARM_ENV}=0"
    if not (len(args) >= 2 and args[0] == sys.executable):
        return "not this interpreter, or no command"
    if args[1] in ("-c", "-m"):
        if len(args) < 3:
            return f"{args[1]} without its argument"
    elif args[1].startswith("-"):
        return f"interpreter flag {args[1]}"  # -X, -W, -u...: set at interpreter start
    unsupported = set(kwargs) - {"capture_output", "text", "check", "timeout", "cwd"}
    if unsupported:
        return f"unsupported arguments {sorted(unsupported)}"
    if not kwargs.get("capture_output"):
        return "output not captured"
    if server_env is not None:
        differs = sorted(k for k in set(env) ^ set(server_env) | {k for k in env if server_env.get(k) != env[k]})
        unsafe = [k for k in differs if not _safe(k)]
        if unsafe:
            return f"environment differs from the server's in {unsafe}"
    return None


def run(args: list[str], *, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(args, env=env, capture_output=True, ...)``, forked from the warm server when it can be."""
    global _server
    env = dict(os.environ if env is None else env)
    if _server is not None and _server.proc.poll() is not None:
        _server = None
    reason = _cold_reason(args, env, None if _server is None else _server.env, kwargs)
    if reason is None and _server is None:
        _server = _Server()
        atexit.register(_server.close)
        reason = _cold_reason(args, env, _server.env, kwargs)
    if reason is not None:
        COLD_RUNS.append(reason)
        return subprocess.run(args, env=env, **kwargs)
    assert _server is not None and _server.proc.stdin is not None
    timeout, text, check = kwargs.get("timeout"), kwargs.get("text", False), kwargs.get("check", False)
    with tempfile.TemporaryDirectory(prefix="warm_python_") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        request = {"argv": args[1:], "env": env, "cwd": str(kwargs.get("cwd") or os.getcwd())}
        request.update(stdout=str(out), stderr=str(err))
        _server.proc.stdin.write((json.dumps(request) + "\n").encode())
        _server.proc.stdin.flush()
        pid = _server.answer(None)["pid"]
        deadline = None if timeout is None else time.monotonic() + timeout
        ended = _server.answer(deadline)
        if not ended:
            try:
                os.killpg(pid, signal.SIGKILL)  # the child leads its own group: its children go too
            except ProcessLookupError:  # not its group's leader yet (a tiny timeout), or already gone
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _server.answer(None)
        stdout, stderr = out.read_bytes(), err.read_bytes()
    outputs: tuple[Any, Any] = (stdout.decode(), stderr.decode()) if text else (stdout, stderr)
    if not ended:
        raise subprocess.TimeoutExpired(args, timeout or 0, *outputs)
    if check and ended["returncode"] != 0:
        raise subprocess.CalledProcessError(ended["returncode"], args, *outputs)
    return subprocess.CompletedProcess(args, ended["returncode"], *outputs)


# ---- the server and its children ---------------------------------------------------------------------


def _exit_status(e: SystemExit) -> int:
    """What the interpreter makes of ``sys.exit(code)``."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _main(argv: list[str], tail: list[str]) -> int:
    """``python *argv`` in this (forked) process; its exit status."""
    import builtins
    import runpy
    import threading
    import types

    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    try:
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[:] = ["", *entries, *tail]
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = builtins
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        elif argv[0] == "-m":
            sys.argv = ["-m", *argv[2:]]
            sys.path[:] = [os.getcwd(), *entries, *tail]
            runpy._run_module_as_main(argv[1])  # type: ignore[attr-defined]  # what `python -m` calls
        else:
            sys.argv = list(argv)
            sys.path[:] = [os.path.dirname(os.path.realpath(argv[0])), *entries, *tail]
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = _exit_status(e)
    except BaseException:
        kind, error, trace = sys.exc_info()
        trace = trace.tb_next if trace else None  # python's own traceback has no frame of _main
        sys.excepthook(kind, error.with_traceback(trace) if error else error, trace)  # type: ignore[arg-type]
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # as at interpreter exit: non-daemon threads
    atexit._run_exitfuncs()
    return code


def _child(request: dict[str, Any], tail: list[str]) -> None:
    code = 1
    try:
        os.setpgid(0, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _main(request["argv"], tail)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: the status still counts
                stream.flush()
        os._exit(code)


def serve() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # torch's import-time output must not reach the answers
    import torch  # noqa: F401  # the point of the server

    tail = sys.path[1:]  # started without PYTHONPATH: the interpreter's own entries, after sys.path[0]
    preloaded = [m for m in NOT_PRELOADED if m in sys.modules]
    answers.write(json.dumps({"ready": not preloaded, "preloaded": preloaded}) + "\n")
    if preloaded:  # they read CXX when imported: a run with another CXX would see the server's
        return
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, tail)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
