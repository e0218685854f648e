"""CPU ranks forked from a preloaded server instead of started as fresh interpreters.

Why: a fresh rank imports torch, this package and (for an engine on vLLM) vLLM before it does
anything, ~7 s of CPU per rank on the 2-core box (``import vllm.config`` alone ~5.5 s), paid again
by every rank of every ranked case. multiprocessing's fork server imports them once per launching
process; each rank is then a fork of a process that has imported but never run anything (no case,
no compile, no torch thread pool), the way vLLM starts its own CPU workers.

Only where nothing has initialised CUDA can be forked safely: gloo on a host without CUDA. nccl
ranks (and gloo on a CUDA host) start as fresh interpreters (``launcher``).

The server starts at the first forked launch of a process, with that moment's environment: what
its imports read then (vLLM's platform) holds for every later rank of that process.

A forked rank sees what a fresh one would: its own session (killed whole as a process group), its
stdout and stderr in the log, stdin from /dev/null, the launcher's environment and working
folder, and ``PYTHONPATH`` / the working folder first on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import multiprocessing
import os
import signal
import sys
from multiprocessing import context, forkserver, popen_forkserver, reduction, spawn, util
from pathlib import Path
from typing import Any

from compile_checks.vocab import RankStart

# the server imports these before it forks any rank (an ImportError is skipped: the rank imports it itself)
PRELOAD = ("compile_checks.ranks.worker",)
PRELOAD_VLLM = "compile_checks.ranks.preload_vllm"


# "0": every rank a fresh interpreter (to rule the fork server out when a rank misbehaves)
FORK_ENV = "COMPILE_CHECKS_RANKS_FORK"


def can_fork(backend: str) -> bool:
    """gloo with CUDA unavailable (nothing in the server or the ranks has touched a CUDA driver), unless
    ``COMPILE_CHECKS_RANKS_FORK=0``."""
    import torch

    setting = os.environ.get(FORK_ENV, "1")
    if setting not in ("0", "1"):
        raise ValueError(f"{FORK_ENV}={setting!r}: expected 1 (fork CPU ranks, the default) or 0")
    return setting == "1" and backend == "gloo" and not torch.cuda.is_available()


# the parts of multiprocessing's start-up data a rank takes: not the launching process's __main__
_MAIN_KEYS = ("init_main_from_name", "init_main_from_path")


class _Popen(popen_forkserver.Popen):  # type: ignore[misc,name-defined]
    """The fork server's start of a process, without re-importing the launcher's ``__main__`` in it.

    multiprocessing imports the parent's main module in every child it starts this way; a user's
    script that runs its ranked case at top level (no ``if __name__ == "__main__"``) would run again
    in every rank. A fresh rank interpreter never imported it. This is CPython's ``_launch``
    (3.11-3.13 alike) with those keys left out of the data the child prepares itself from.
    """

    def _launch(self, process_obj: Any) -> None:
        prep_data = {k: v for k, v in spawn.get_preparation_data(process_obj._name).items() if k not in _MAIN_KEYS}
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        _parent_w = os.dup(w)  # the child's sentinel of this parent (as in CPython)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _RankProcess(context.ForkServerProcess):  # type: ignore[misc,name-defined]
    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:
        return _Popen(process_obj)


@functools.cache  # once per process: the preload takes effect only when the server starts (first forked launch)
def _set_server_preload() -> None:
    vllm = importlib.util.find_spec("vllm") is not None  # an engine's case on vLLM imports it in every rank
    multiprocessing.get_context("forkserver").set_forkserver_preload([*PRELOAD, *([PRELOAD_VLLM] if vllm else [])])


def start_server() -> None:
    """The fork server up now, with its preload; otherwise it starts at the first forked launch, whose
    ``timeout_s`` (counted from before its ranks start) then also covers the preload's seconds."""
    _set_server_preload()
    forkserver.ensure_running()


def _rank_main(job_path: str, log_path: str, env: dict[str, str], cwd: str) -> None:
    """The forked rank: become what ``python -m compile_checks.ranks.worker JOB`` would be, then run it."""
    os.setsid()  # its own process group, as start_new_session gives a fresh rank
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [cwd, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    from compile_checks.ranks.worker import main

    sys.exit(main(job_path, start=RankStart.FORKED))


class ForkedRank:
    """A forked rank behind the part of ``subprocess.Popen`` the launcher uses (pid, poll, returncode, wait)."""

    def __init__(self, job_path: Path, log_path: Path, env: dict[str, str]) -> None:
        start_server()
        self._proc = _RankProcess(
            target=_rank_main, args=(str(job_path), str(log_path), env, os.getcwd()), name=f"rank:{job_path.stem}"
        )
        self._proc.start()
        self.pid: int = self._proc.pid  # type: ignore[assignment]

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode

    def poll(self) -> int | None:
        return self._proc.exitcode

    def wait(self) -> int | None:
        self._proc.join()
        return self._proc.exitcode

    def kill_group(self) -> None:
        """SIGKILL its process group; a rank killed before its ``setsid`` has none yet: kill the rank alone
        (unless it has ended: the server reaps it at once, and its pid may be another process's by now)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            if self._proc.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
