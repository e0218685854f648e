"""Start one process per rank, wait for all within the case's timeout, collect each rank's JSON.

Each rank is ``python -m compile_checks.ranks.worker JOB.json`` (under gloo on a host without CUDA,
the same worker forked from a preloaded server: ``forked``) in its own session (so a hung
rank, and any compile workers it started, are killed as one process group), joining the group
at ``tcp://127.0.0.1:PORT`` on a free port. ``MASTER_ADDR`` / ``MASTER_PORT`` / ``RANK`` /
``LOCAL_RANK`` / ``WORLD_SIZE`` are set too, for engine code that reads them. When one rank
fails, its peers are likely blocked in a collective waiting for it: they get a short grace,
then are stopped, so a dead rank costs seconds, not the whole timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import compile_checks
from compile_checks.ranks.forked import ForkedRank, can_fork, start_forked
from compile_checks.ranks.spec import RankedCase

# after a rank failed, how long its peers may still finish on their own before they are stopped
PEER_GRACE_S = 5.0
LOG_TAIL_LINES = 25


@dataclass
class RankRun:
    """One rank's process as the launcher saw it."""

    rank: int
    returncode: int | None  # None: still running at the deadline (or after a peer failed), then killed
    seconds: float
    log_tail: str
    result: dict[str, Any] | None  # the worker's JSON; None when it wrote none
    stopped_because: str | None = None  # why the launcher killed it ("timeout", "peer failed")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_backend() -> str:
    import torch  # lazy: planning a ranked case stays torch-free

    return "nccl" if torch.cuda.is_available() else "gloo"


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _child_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    # the same compile_checks in every rank as in this process (an editable checkout, a test's PYTHONPATH)
    package_root = str(Path(compile_checks.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    env.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size)
    )
    return env


RankProcess = subprocess.Popen[bytes] | ForkedRank


def rank_end_seconds(seen_s: float, result: dict[str, Any] | None, launched_at: float) -> float:
    """When the rank ended, in seconds since launch: its own clock (``ended_at``) where it wrote one, else when
    the launcher saw it gone. Ranks that end within one poll are seen together; their own ends keep the rank that
    failed first (the cause) ahead of the peer that failed because of it."""
    if result is None or "ended_at" not in result:
        return seen_s
    return min(seen_s, float(result["ended_at"]) - launched_at)


def _stop(proc: RankProcess) -> None:
    """Kill the rank's process group (its own session: ``start_new_session``, or the forked rank's ``setsid``)."""
    if isinstance(proc, ForkedRank):
        proc.kill_group()
    else:
        with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _start_fresh(job_path: Path, log_path: Path, env: dict[str, str]) -> RankProcess:
    """One rank as a fresh interpreter (``python -m compile_checks.ranks.worker JOB``)."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "compile_checks.ranks.worker", str(job_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: killed whole, and no Ctrl-C of ours
        )


def _job(
    ranked: RankedCase, rank: int, *, backend: str, port: int, analysis_only: bool, dump_dir: str | None, result: Path
) -> dict[str, Any]:
    factory = ranked.factory_ref()
    return {
        "name": ranked.name,
        "rank": rank,
        "world_size": ranked.world_size,
        "backend": backend,
        "init_method": f"tcp://127.0.0.1:{port}",
        "timeout_s": ranked.timeout_s,
        "factory": {"module": factory.module, "name": factory.name, "file": factory.file},
        "expect_clean": ranked.expectation(rank),
        "pipeline": str(ranked.pipeline),
        "analysis_only": analysis_only,
        "dump_dir": None if dump_dir is None else str(Path(dump_dir) / f"rank{rank}"),
        "result": str(result),
        "spawned_at": time.time(),
    }


def _wait(
    procs: list[RankProcess], timeout_s: float, started: float, poll_s: float
) -> tuple[dict[int, float], dict[int, str]]:
    """Every rank's end (seconds since start), and why the launcher stopped the ones it killed."""
    ended: dict[int, float] = {}
    stopped: dict[int, str] = {}
    failed_at: float | None = None
    while len(ended) < len(procs):
        now = time.perf_counter()
        for rank, proc in enumerate(procs):
            if rank not in ended and proc.poll() is not None:
                ended[rank] = now - started
                if proc.returncode != 0 and failed_at is None:
                    failed_at = now
        reason = None
        if now - started >= timeout_s:
            reason = f"still running at the timeout ({timeout_s:g} s): hung?"
        elif failed_at is not None and now - failed_at >= PEER_GRACE_S:
            reason = "stopped: another rank failed first (it was probably waiting for it in a collective)"
        if reason is not None:
            for rank in [r for r in range(len(procs)) if r not in ended]:
                _stop(procs[rank])
                stopped[rank] = reason
                ended[rank] = time.perf_counter() - started
            break
        time.sleep(poll_s)
    return ended, stopped


def launch(
    ranked: RankedCase, *, backend: str, analysis_only: bool, dump_dir: str | None, poll_s: float = 0.05
) -> list[RankRun]:
    """Run every rank of ``ranked`` to its end, a failure, or the timeout; one :class:`RankRun` per rank.

    With ``dump_dir`` each rank's whole log is kept as ``<dump_dir>/rank<N>.log``.
    """
    port = free_port()
    with tempfile.TemporaryDirectory(prefix=f"compile_checks_ranks_{os.getpid()}_") as tmp:
        work = Path(tmp)
        procs: list[RankProcess] = []
        forked = can_fork(backend)
        started, launched_at = time.perf_counter(), time.time()
        jobs = [work / f"rank{rank}.job.json" for rank in range(ranked.world_size)]
        logs = [work / f"rank{rank}.log" for rank in range(ranked.world_size)]
        envs = [_child_env(rank, ranked.world_size, port) for rank in range(ranked.world_size)]
        try:
            for rank in range(ranked.world_size):
                job = _job(
                    ranked,
                    rank,
                    backend=backend,
                    port=port,
                    analysis_only=analysis_only,
                    dump_dir=dump_dir,
                    result=work / f"rank{rank}.json",
                )
                jobs[rank].write_text(json.dumps(job))
            if forked:  # every rank at once: torch.multiprocessing.start_processes from the preloaded fork server
                procs.extend(start_forked(jobs, logs, envs))
            else:
                procs.extend(_start_fresh(job, log, env) for job, log, env in zip(jobs, logs, envs))
            ended, stopped = _wait(procs, ranked.timeout_s, started, poll_s)
        finally:  # an interrupt (or a failed start) must not leave ranks running in their own sessions
            for proc in procs:
                if proc.poll() is None:
                    _stop(proc)
        if dump_dir is not None:
            Path(dump_dir).mkdir(parents=True, exist_ok=True)
            for rank in range(len(procs)):
                shutil.copyfile(work / f"rank{rank}.log", Path(dump_dir) / f"rank{rank}.log")
        runs = []
        for rank, proc in enumerate(procs):
            result_file = work / f"rank{rank}.json"
            result = json.loads(result_file.read_text()) if result_file.is_file() else None
            seconds = rank_end_seconds(ended[rank], result, launched_at)
            runs.append(
                RankRun(
                    rank=rank,
                    returncode=None if rank in stopped else proc.returncode,
                    seconds=seconds,
                    log_tail=_tail(work / f"rank{rank}.log"),
                    result=result,
                    stopped_because=stopped.get(rank),
                )
            )
        return runs


__all__ = ["PEER_GRACE_S", "RankRun", "default_backend", "free_port", "launch", "rank_end_seconds"]
