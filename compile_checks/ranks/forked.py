"""CPU ranks forked from a preloaded server instead of started as fresh interpreters
(``torch.multiprocessing.start_processes`` with multiprocessing's fork server).

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
import multiprocessing
import os
import signal
import sys
import types
from collections.abc import Iterator, Sequence
from multiprocessing import forkserver
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


@functools.cache  # once per process: the preload takes effect only when the server starts (first forked launch)
def _set_server_preload() -> None:
    vllm = importlib.util.find_spec("vllm") is not None  # an engine's case on vLLM imports it in every rank
    multiprocessing.get_context("forkserver").set_forkserver_preload([*PRELOAD, *([PRELOAD_VLLM] if vllm else [])])


def start_server() -> None:
    """The fork server up now, with its preload; otherwise it starts at the first forked launch, whose
    ``timeout_s`` (counted from before its ranks start) then also covers the preload's seconds."""
    _set_server_preload()
    forkserver.ensure_running()  # multiprocessing's own start of its server, with the preload set above


@contextlib.contextmanager
def _launching_script_hidden() -> Iterator[None]:
    """While the ranks start, ``__main__`` is a bare module (as in an interactive interpreter).

    multiprocessing's fork server start imports the launching process's main module again in every child
    (``__mp_main__``): an engine's check script that runs its ranked case at top level (no
    ``if __name__ == "__main__"``) would run again in every rank. A fresh rank interpreter never imports it,
    and a main module without ``__file__`` or ``__spec__`` is one multiprocessing does not import."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def _rank_main(rank: int, jobs: Sequence[str], logs: Sequence[str], envs: Sequence[dict[str, str]], cwd: str) -> None:
    """The forked rank (``torch.multiprocessing``'s ``fn(i, *args)``): become what
    ``python -m compile_checks.ranks.worker JOB`` would be, then run it."""
    os.setsid()  # its own process group, as start_new_session gives a fresh rank
    log = os.open(logs[rank], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(envs[rank])
    sys.path[:0] = [cwd, *filter(None, envs[rank].get("PYTHONPATH", "").split(os.pathsep))]
    from compile_checks.ranks.worker import main

    sys.exit(main(jobs[rank], start=RankStart.FORKED))


class ForkedRank:
    """A forked rank behind the part of ``subprocess.Popen`` the launcher uses (pid, poll, returncode, wait)."""

    def __init__(self, process: Any, error_file: str) -> None:
        self._proc = process
        self._error_file = error_file  # torch.multiprocessing's: written only if the rank's fn raised past main
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode  # type: ignore[no-any-return]

    def poll(self) -> int | None:
        return self.returncode

    def wait(self) -> int | None:
        self._proc.join()
        with contextlib.suppress(OSError):
            os.unlink(self._error_file)
        return self.returncode

    def kill_group(self) -> None:
        """SIGKILL its process group; a rank killed before its ``setsid`` has none yet: kill the rank alone
        (unless it has ended: the server reaps it at once, and its pid may be another process's by now)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            if self._proc.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)


def start_forked(jobs: Sequence[Path], logs: Sequence[Path], envs: Sequence[dict[str, str]]) -> list[ForkedRank]:
    """Every rank forked from the preloaded server by ``torch.multiprocessing.start_processes`` (rank ``i`` runs
    ``_rank_main(i, ...)``), each with its job, log and environment; started, not waited for."""
    import torch.multiprocessing

    start_server()
    with _launching_script_hidden():
        context = torch.multiprocessing.start_processes(
            _rank_main,
            args=([str(j) for j in jobs], [str(g) for g in logs], list(envs), os.getcwd()),
            nprocs=len(jobs),
            join=False,
            start_method="forkserver",
        )
    return [ForkedRank(p, f) for p, f in zip(context.processes, context.error_files)]
