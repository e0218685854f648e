"""Run a :class:`~compile_checks.gate.plan.GatePlan` case by case (:mod:`compile_checks.gate.one_case`);
one plain :class:`~compile_checks.gate.outcome.Outcome` per case.

``--jobs N`` runs cases in this process and ``N - 1`` spawned workers (:class:`Workers`), each worker
rebuilding its cases from the plan's description. A case that fails to compile does not stop the
run: its outcome carries the error.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from compile_checks.gate.one_case import CaseBuilder, has_builtin, own_this_process, run_planned, warm_up
from compile_checks.gate.outcome import Outcome

if TYPE_CHECKING:
    from compile_checks.gate.plan import GatePlan, PlannedCase


# ---- process pool (--jobs N) ----------------------------------------------------------------

_WORKER_BUILDER: CaseBuilder | None = None


def _worker_init(threads: int) -> None:
    global _WORKER_BUILDER
    atexit.register(exit_without_teardown)
    import torch  # lazy: only a spawned worker sets torch's threads; the runner's import stays torch-free

    from compile_checks.pipelines.vllm_env import prepare_process_for_vllm

    own_this_process()  # a worker runs the gate's cases and nothing else
    prepare_process_for_vllm()  # before a case can import vLLM, as the gate's CLI does in the parent
    torch.set_num_threads(threads)
    _WORKER_BUILDER = CaseBuilder()


def exit_without_teardown() -> None:
    """An exit handler that ends the process without the interpreter's teardown of its heap.

    It runs every other exit handler first (torch's, Inductor's, vLLM's, multiprocessing's, whenever
    they were registered), flushes stdio, then ``os._exit(0)``. What it skips is the teardown that frees
    every torch / Inductor / vLLM object one by one: ~2 s on the 2-core box, which the gate (a spawned
    ``--jobs`` worker, whose outcomes are sent already) or pytest's controller (an xdist worker,
    ``tests/conftest.py``) waits out before printing.
    """
    atexit.unregister(exit_without_teardown)
    atexit._run_exitfuncs()  # the rest, last registered first, as the interpreter would run them
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _worker_run(planned: PlannedCase, dump_root: Path | None) -> Outcome:
    assert _WORKER_BUILDER is not None
    return run_planned(planned, _WORKER_BUILDER, dump_root)


# --jobs default: measured on a 2-core machine, the 24-case default gate took
# 79.9 s with 2 spawned workers vs 106.9 s in-process when the box was otherwise quiet; a worker
# costs one torch/Inductor/vLLM import (~5-7 s of CPU), so small plans stay in-process (and with
# --jobs 2 this process is one of the two).
AUTO_JOBS_MIN_CASES = 8


def auto_jobs(num_cases: int) -> int:
    return min(2, os.cpu_count() or 1) if num_cases >= AUTO_JOBS_MIN_CASES else 1


class Workers:
    """The ``jobs - 1`` spawned processes of a ``--jobs`` run, started before it needs them.

    A worker pays the torch/vLLM/Inductor import again (~5-7 s of CPU); started before planning
    (the CLI does, for the built-in gate and for ``--jobs N``) it imports (:func:`warm_up`; ``builtin``:
    the scenarios too) while this process plans, and takes its first case as soon as both are done,
    while this process imports for its own. ``close()`` after the run; ``stop()`` when the run does
    not come (a usage error, a plan too small for them).
    """

    def __init__(self, jobs: int, *, builtin: bool = False) -> None:
        self.jobs = jobs
        self.threads = max(1, (os.cpu_count() or 1) // jobs)
        ctx = multiprocessing.get_context("spawn")  # fork after torch is imported is unsafe
        self.pool = ProcessPoolExecutor(
            max_workers=jobs - 1, mp_context=ctx, initializer=_worker_init, initargs=(self.threads,)
        )
        for _ in range(jobs - 1):  # a pool starts its processes at the first submissions
            self.pool.submit(warm_up, builtin)

    def close(self) -> None:
        """After the run (every outcome is in): the workers exit, not waited for here.

        A spawned worker ends in ``sys.exit``, so its interpreter tears down the torch / Inductor /
        vLLM heap first: ~2 s on the 2-core box that the gate used to wait out before printing its
        table. The pool's own exit hook still joins the processes when this interpreter exits, so
        none outlives the gate.
        """
        self.pool.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """Not needed after all (a usage error, a plan too small): stopped now, not after their imports.

        The pool's manager thread joins the same processes: whichever thread reaps one first, the
        other's ``is_alive()`` reads True until the reaper stores the exit code (``waitpid`` fails
        with ECHILD for the loser). So the manager thread is waited for before anything is judged.
        """
        processes = list((getattr(self.pool, "_processes", None) or {}).values())
        manager = getattr(self.pool, "_executor_manager_thread", None)
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        if manager is not None:
            manager.join(timeout=5)
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():  # SIGTERM not acted on (seen once under load while importing): SIGKILL
                process.kill()
        if manager is not None:
            manager.join(timeout=5)
        for process in processes:
            process.join(timeout=5)


def run_plan(
    plan: GatePlan,
    *,
    dump_root: Path | None = None,
    jobs: int = 1,
    on_done: Callable[[Outcome], None] | None = None,
    workers: Workers | None = None,
) -> list[Outcome]:
    """Every planned case, in plan order; ``jobs > 1`` runs them in this process and ``jobs - 1`` spawned
    ones (``workers``, when already started for this many jobs; closed here either way)."""
    builder = CaseBuilder(plan.preloaded)
    if jobs <= 1 or len(plan.cases) <= 1:
        if workers is not None:
            workers.stop()
        warm_up(has_builtin(plan.cases))
        outcomes = []
        for planned in plan.cases:
            outcomes.append(run_planned(planned, builder, dump_root))
            if on_done is not None:
                on_done(outcomes[-1])
        return outcomes
    if workers is not None and workers.jobs != jobs:
        workers.stop()
        workers = None
    try:
        if workers is None:
            workers = Workers(jobs, builtin=has_builtin(plan.cases))
        return _run_parallel(plan.cases, builder, dump_root, workers, on_done)
    finally:
        if workers is not None:
            workers.close()


def _run_parallel(
    cases: Sequence[PlannedCase],
    builder: CaseBuilder,
    dump_root: Path | None,
    workers: Workers,
    on_done: Callable[[Outcome], None] | None,
) -> list[Outcome]:
    """One queue of cases, served by this process and the spawned ``workers``.

    This process is one of the ``jobs``: it has already imported torch, vLLM and the cases while
    planning. Each worker takes its next case when it finishes one (a done-callback submits it),
    this process in between.
    """
    import torch  # lazy: planning stays torch-free

    pool = workers.pool
    # full compiles first: each is several analysis cases long, so they overlap the rest
    queue = collections.deque(sorted(range(len(cases)), key=lambda i: cases[i].analysis_only))
    lock = threading.Lock()
    results: dict[int, Outcome] = {}
    failures: list[BaseException] = []
    settled = threading.Event()  # every case has its outcome, or a worker died

    def take() -> int | None:
        with lock:
            return queue.popleft() if queue else None

    def record(i: int, outcome: Outcome) -> None:
        with lock:
            results[i] = outcome
            if on_done is not None:
                on_done(outcome)
            if len(results) == len(cases):
                settled.set()

    def submit_next() -> None:
        i = take()
        if i is None:
            return
        future = pool.submit(_worker_run, cases[i], dump_root)

        def finished(f: Future[Outcome], i: int = i) -> None:
            try:
                record(i, f.result())
            except BaseException as e:  # a worker died (BrokenProcessPool): raised below, not lost
                failures.append(e)
                settled.set()
                return
            submit_next()

        future.add_done_callback(finished)

    for _ in range(workers.jobs - 1):
        submit_next()
    warm_up(has_builtin(cases))  # after the workers have their first cases: they need not wait for it
    saved = torch.get_num_threads()
    torch.set_num_threads(workers.threads)
    try:
        while (i := take()) is not None:
            record(i, run_planned(cases[i], builder, dump_root))
    finally:
        torch.set_num_threads(saved)
    settled.wait()  # the workers' last cases (their processes' exit is not waited for: Workers.close)
    if failures:
        raise failures[0]
    return [results[i] for i in range(len(cases))]


__all__ = [
    "AUTO_JOBS_MIN_CASES",
    "CaseBuilder",
    "Outcome",
    "Workers",
    "auto_jobs",
    "exit_without_teardown",
    "run_plan",
    "run_planned",
]
