"""Run a :class:`~compile_checks.gate.plan.GatePlan` through ``run_case``; one plain outcome per case.

An :class:`Outcome` holds only plain data (no tensors, no functions) so it crosses a process
boundary (``--jobs N`` runs cases in this process and ``N - 1`` spawned workers, each worker
rebuilding its cases from the plan's description) and feeds the table, ``--json`` and the JUnit writer alike.
A case that fails to compile does not stop the run: its outcome carries the error.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from compile_checks.case import Case, CaseResult, run_case
from compile_checks.gate.stderr_noise import terminal
from compile_checks.ranks import RankedCase, RankedResult, run_ranked
from compile_checks.verdict import case_passed, copy_fields, failure_reasons, render_copy, verdict_met
from compile_checks.vocab import PHASES, ErrorKind, Pipeline

if TYPE_CHECKING:
    from compile_checks.gate.plan import CaseSource, GatePlan, PlannedCase
    from compile_checks.gate.targets import Declared


@dataclass
class Outcome:
    """What one planned case came to (plain data)."""

    label: str
    group: str
    pipeline: Pipeline | str  # a Pipeline; a scan's rows say "trace" (compile_checks.scan: any pipeline logged it)
    expect_clean: bool
    analysis_only: bool
    codegen_smoke: bool = False
    description: str = ""
    clean: bool | None = None  # None: the case did not run to a verdict (see ``error``)
    check_errors: list[str] = field(default_factory=list)  # report.errors / unanalysed regions
    eager_match: bool | None = None
    max_abs_diff: float | None = None
    clones: list[dict[str, Any]] = field(default_factory=list)  # compile_checks.verdict.copy_fields
    other_clones: list[dict[str, Any]] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    compile_seconds: float = 0.0
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_kind: ErrorKind | None = None
    retargeted_from: Pipeline | None = None  # PlannedCase.retargeted_from: the failure reason names the change
    # a ranked case (compile_checks.ranks): ``rank N: why`` for each rank that missed its own expectation
    rank_failures: list[str] = field(default_factory=list)

    @property
    def verdict_met(self) -> bool:
        """The copy verdict is what the case expects, from a usable check (:func:`verdict.verdict_met`)."""
        return (
            self.error is None
            and not self.rank_failures
            and verdict_met(expect_clean=self.expect_clean, clean=self.clean, problems=self.check_errors)
        )

    @property
    def passed(self) -> bool:
        """:attr:`verdict_met`, and compiled == eager where checked (:func:`verdict.case_passed`)."""
        return (
            self.error is None
            and not self.rank_failures
            and case_passed(
                expect_clean=self.expect_clean,
                clean=self.clean,
                problems=self.check_errors,
                eager_match=self.eager_match,
            )
        )

    def failure_reasons(self, copies_listed: bool = False) -> list[str]:
        """Why the case failed (the error, else :func:`verdict.failure_reasons`); empty when it passed."""
        if self.error is not None:
            return [self.error]
        if self.rank_failures:  # each rank against its own expectation; then compiled == eager, merged
            eager = failure_reasons(
                expect_clean=True,
                clean=True,
                problems=[],
                copies=[],
                eager_match=self.eager_match,
                max_abs_diff=self.max_abs_diff,
            )
            copies = [] if copies_listed else [render_copy(c) for c in [*self.clones, *self.other_clones]]
            return [*self.rank_failures, *copies, *eager]
        return failure_reasons(
            expect_clean=self.expect_clean,
            clean=self.clean,
            problems=self.check_errors,
            copies=[*self.clones, *self.other_clones],
            eager_match=self.eager_match,
            max_abs_diff=self.max_abs_diff,
            copies_listed=copies_listed,
            pipeline=self.pipeline,
            retargeted_from=self.retargeted_from,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(verdict_met=self.verdict_met, passed=self.passed)
        return d


def _phase_totals(report: Any) -> dict[str, float]:
    per_region = report.region_phase_seconds
    totals = dict.fromkeys(PHASES, 0.0) if per_region else {}
    for phases in per_region.values():
        for k, v in phases.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    return totals


def outcome_from_result(planned: PlannedCase, result: CaseResult) -> Outcome:
    report = result.report
    check_errors = list(report.problems)  # errors, and blind spots unless the case allows them
    out = Outcome(
        label=planned.label,
        group=planned.group,
        pipeline=planned.pipeline,
        expect_clean=planned.expect_clean,
        analysis_only=result.analysis_only,
        codegen_smoke=planned.codegen_smoke,
        description=result.case.description,
        clean=bool(report.clean),
        check_errors=check_errors,
        eager_match=result.eager_match,
        max_abs_diff=result.max_abs_diff,
        clones=[copy_fields(c) for c in report.clones],
        other_clones=[copy_fields(c) for c in report.other_clones],
        phase_seconds=_phase_totals(report),
        compile_seconds=result.compile_seconds,
        wall_seconds=result.wall_seconds,
        notes=list(result.notes) + list(report.notes),
        report=report.to_dict(),
        retargeted_from=planned.retargeted_from,
    )
    if planned.codegen_smoke and result.eager_match is None:
        out.check_errors.append("codegen smoke case has no verify(): compiled == eager was not checked")
    return out


def outcome_from_ranked(planned: PlannedCase, result: RankedResult) -> Outcome:
    """A ranked case's merged result: copies keyed by rank, each rank judged against its own expectation
    (``rank_failures``), a rank without a verdict an error (exit 4), every rank's report in ``report``."""
    ranks = result.results
    diffs = [r["max_abs_diff"] for r in ranks.values() if r["max_abs_diff"] is not None]
    errors = result.errors
    return Outcome(
        label=planned.label,
        group=planned.group,
        pipeline=planned.pipeline,
        expect_clean=planned.expect_clean,
        analysis_only=result.analysis_only,
        description=result.ranked.description or f"{result.ranked.world_size} ranks ({result.backend})",
        clean=result.clean,
        check_errors=[f"rank {k}: {p}" for k, r in sorted(ranks.items()) for p in r["problems"]],
        eager_match=result.eager_match,
        max_abs_diff=max(diffs) if diffs else None,
        clones=result.copies(),
        other_clones=result.other_copies(),
        compile_seconds=max((r["compile_seconds"] for r in ranks.values()), default=0.0),
        wall_seconds=result.wall_seconds,
        notes=[*result.differences, *(f"rank {k}: {n}" for k, r in sorted(ranks.items()) for n in r["notes"])],
        report=result.to_dict(),
        rank_failures=result.rank_failures,
        error="\n".join(errors) if errors else None,
        error_kind=ErrorKind.COMPILE if errors else None,
    )


class CaseBuilder:
    """Builds each planned case once per process, reusing what planning already read (a ``LazyCase``
    is built here, when its case runs)."""

    def __init__(self, preloaded: dict[CaseSource, list[Declared]] | None = None) -> None:
        self._pending: dict[CaseSource, dict[str, Declared]] = {
            src: {c.name: c for c in cases} for src, cases in (preloaded or {}).items()
        }

    def take(self, planned: PlannedCase) -> Case | RankedCase:
        pending = self._pending.setdefault(planned.source, {})
        if planned.case_name not in pending:  # read the source again; what planning read is used first
            pending.update({c.name: c for c in planned.source.declared() if c.name not in pending})
        entry = pending.pop(planned.case_name, None)
        if entry is None:
            raise ValueError(
                f"case {planned.case_name!r} vanished from {planned.source.spec or 'the built-in cases'} on reload"
            )
        return planned.source.build(entry)


def _dump_dir(root: Path | None, label: str) -> str | None:
    return None if root is None else str(root / re.sub(r"[^A-Za-z0-9_.-]+", "_", label))


def run_planned(planned: PlannedCase, builder: CaseBuilder, dump_root: Path | None) -> Outcome:
    """One case through ``run_case``; compile and write failures become the outcome's error."""
    from compile_checks.api import CompileCheckError  # lazy: api imports torch; planning stays torch-free

    t0 = time.perf_counter()

    def failed(kind: ErrorKind, message: str) -> Outcome:
        return Outcome(
            planned.label,
            planned.group,
            planned.pipeline,
            planned.expect_clean,
            planned.analysis_only,
            planned.codegen_smoke,
            error=message,
            error_kind=kind,
            wall_seconds=time.perf_counter() - t0,
        )

    try:
        case = builder.take(planned)
        if isinstance(case, RankedCase):  # every rank in its own process, each through run_case
            ranked = run_ranked(case, analysis_only=planned.analysis_only, dump_dir=_dump_dir(dump_root, planned.label))
            return outcome_from_ranked(planned, ranked)
        result = run_case(case, analysis_only=planned.analysis_only, dump_dir=_dump_dir(dump_root, planned.label))
    except CompileCheckError as e:
        return failed(ErrorKind.COMPILE, f"{getattr(e, 'phase', 'compile')} failed: {e}")
    except SystemExit as e:  # the case's own code exited: an error of this case, never the gate's exit 0
        return failed(ErrorKind.COMPILE, f"the case's code called sys.exit({e.code!r}) (SystemExit)")
    except OSError as e:
        return failed(ErrorKind.UNWRITABLE, f"cannot write dumps: {e}")
    except Exception as e:
        first = (str(e).splitlines() or [""])[0]
        return failed(ErrorKind.COMPILE, f"the check failed: {type(e).__name__}: {first}")
    return outcome_from_result(planned, result)


# ---- process pool (--jobs N) ----------------------------------------------------------------

_WORKER_BUILDER: CaseBuilder | None = None


def _worker_init(threads: int) -> None:
    global _WORKER_BUILDER
    import torch  # lazy: only a spawned worker sets torch's threads; the runner's import stays torch-free

    torch.set_num_threads(threads)
    _WORKER_BUILDER = CaseBuilder()


def _worker_run(planned: PlannedCase, dump_root: Path | None) -> Outcome:
    assert _WORKER_BUILDER is not None
    return run_planned(planned, _WORKER_BUILDER, dump_root)


# --jobs default: measured on the 2-core box (README "Gate speed"), the 24-case default gate took
# 79.9 s with 2 spawned workers vs 106.9 s in-process when the box was otherwise quiet; a worker
# costs one torch/Inductor/vLLM import (~5-7 s of CPU), so small plans stay in-process (and with
# --jobs 2 this process is one of the two).
AUTO_JOBS_MIN_CASES = 8


def auto_jobs(num_cases: int) -> int:
    return min(2, os.cpu_count() or 1) if num_cases >= AUTO_JOBS_MIN_CASES else 1


def run_plan(
    plan: GatePlan,
    *,
    dump_root: Path | None = None,
    jobs: int = 1,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every planned case, in plan order; ``jobs > 1`` runs them in this process and ``jobs - 1`` spawned ones."""
    builder = CaseBuilder(plan.preloaded)
    if jobs <= 1 or len(plan.cases) <= 1:
        outcomes = []
        for planned in plan.cases:
            outcomes.append(run_planned(planned, builder, dump_root))
            if on_done is not None:
                on_done(outcomes[-1])
        return outcomes
    return _run_parallel(plan.cases, builder, dump_root, jobs, on_done)


def _run_parallel(
    cases: Sequence[PlannedCase],
    builder: CaseBuilder,
    dump_root: Path | None,
    jobs: int,
    on_done: Callable[[Outcome], None] | None,
) -> list[Outcome]:
    """One queue of cases, served by this process and ``jobs - 1`` spawned workers.

    This process is one of the ``jobs``: it has already imported torch, vLLM and the cases while
    planning, where a spawned worker pays that import again (~7 s of CPU with vLLM). Each worker
    takes its next case when it finishes one (a done-callback submits it), this process in between.
    """
    import torch  # lazy: planning stays torch-free

    threads = max(1, (os.cpu_count() or 1) // jobs)
    ctx = multiprocessing.get_context("spawn")  # fork after torch is imported is unsafe
    # full compiles first: each is several analysis cases long, so they overlap the rest
    queue = collections.deque(sorted(range(len(cases)), key=lambda i: cases[i].analysis_only))
    lock = threading.Lock()
    results: dict[int, Outcome] = {}
    failures: list[BaseException] = []

    def take() -> int | None:
        with lock:
            return queue.popleft() if queue else None

    def record(i: int, outcome: Outcome) -> None:
        with lock:
            results[i] = outcome
            if on_done is not None:
                on_done(outcome)

    with ProcessPoolExecutor(
        max_workers=jobs - 1, mp_context=ctx, initializer=_worker_init, initargs=(threads,)
    ) as pool:

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
                    return
                submit_next()

            future.add_done_callback(finished)

        for _ in range(jobs - 1):
            submit_next()
        saved = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            while (i := take()) is not None:
                record(i, run_planned(cases[i], builder, dump_root))
        finally:
            torch.set_num_threads(saved)
    if failures:
        raise failures[0]
    return [results[i] for i in range(len(cases))]


# ---- the gate against `python -c "import torch"` (--timings) ---------------------------------


def import_torch_seconds() -> float:
    """Wall seconds of ``python -c "import torch"`` with this interpreter: the gate's unit of cost."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True)
    return time.perf_counter() - t0


def process_seconds() -> float | None:
    """Wall seconds since this process started (Linux ``/proc``), the gate's whole cost; None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, after "(comm)"
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def import_torch_comparison(gate_seconds: float, import_torch: Sequence[float]) -> str:
    """One line: the gate's wall as a multiple of ``import torch``, timed in the same run (side by side)."""
    unit = statistics.median(import_torch)
    samples = " / ".join(f"{t:.2f}" for t in import_torch)
    return (
        f'gate {gate_seconds:.1f} s (process wall) = {gate_seconds / unit:.1f}x `python -c "import torch"` '
        f"({unit:.2f} s, median of {samples} s timed before and after the gate in this run)"
    )


def progress_callback(total: int, enabled: bool) -> tuple[Callable[[Outcome], None] | None, Callable[[], None]]:
    """A tqdm bar on the real stderr when it is a terminal (and ``enabled``); (callback, close)."""
    stream = terminal()  # torch's stderr may be held (stderr_noise); the bar is ours
    if not enabled or not stream.isatty():
        return None, lambda: None
    bar = tqdm(total=total, desc="gate", unit="case", file=stream, leave=False)

    def done(o: Outcome) -> None:
        bar.set_postfix_str(o.label)
        bar.update(1)

    return done, bar.close


__all__ = [
    "AUTO_JOBS_MIN_CASES",
    "PHASES",
    "CaseBuilder",
    "Outcome",
    "auto_jobs",
    "import_torch_comparison",
    "import_torch_seconds",
    "outcome_from_ranked",
    "outcome_from_result",
    "process_seconds",
    "progress_callback",
    "run_plan",
    "run_planned",
]
