"""One planned case through ``run_case`` in this process: its :class:`CaseBuilder`, :func:`run_planned`
(compile and write failures become the outcome's error) and :func:`warm_up` (the imports a process
needs before its first case). :mod:`compile_checks.gate.runner` runs a whole plan with them, here
and in its ``--jobs`` workers.
"""

from __future__ import annotations

import gc
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from compile_checks.case import Case, run_case
from compile_checks.case.floor import check_run, floor_run
from compile_checks.gate.outcome import Outcome, outcome_from_ranked, outcome_from_result
from compile_checks.gate.sources import BUILTIN
from compile_checks.pipelines.vllm_env import undo_nvml_cuda_check
from compile_checks.ranks import RankedCase, run_ranked
from compile_checks.vocab import ErrorKind

if TYPE_CHECKING:
    from compile_checks.gate.plan import CaseSource, PlannedCase
    from compile_checks.gate.targets import Declared


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
    from compile_checks.errors import UsageError
    from compile_checks.pools import PoolNamingError
    from compile_checks.session import CompileCheckError  # lazy: it imports torch; planning stays torch-free

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
        if _OWNS_PROCESS:  # building a user's case may be what imported vLLM
            undo_nvml_cuda_check()
        if isinstance(case, RankedCase):  # every rank in its own process, each through run_case
            ranked = run_ranked(case, analysis_only=planned.analysis_only, dump_dir=_dump_dir(dump_root, planned.label))
            return outcome_from_ranked(planned, ranked)
        result = run_case(case, analysis_only=planned.analysis_only, dump_dir=_dump_dir(dump_root, planned.label))
        floor = _floor(planned, case) if planned.floor else None
    except PoolNamingError as e:  # the user's naming, as a target typo is: a usage error (exit 2)
        return failed(ErrorKind.USAGE, f"bad pool naming: {e}")
    except UsageError as e:  # e.g. real tensors beside meta / fake ones (compile_checks.no_values)
        return failed(ErrorKind.USAGE, str(e))
    except CompileCheckError as e:
        return failed(ErrorKind.COMPILE, f"{getattr(e, 'phase', 'compile')} failed: {e}")
    except SystemExit as e:  # the case's own code exited: an error of this case, never the gate's exit 0
        return failed(ErrorKind.COMPILE, f"the case's code called sys.exit({e.code!r}) (SystemExit)")
    except OSError as e:
        return failed(ErrorKind.UNWRITABLE, f"cannot write dumps: {e}")
    except Exception as e:
        return failed(ErrorKind.COMPILE, f"the check failed: {_error_line(e)}")
    outcome = outcome_from_result(planned, result)
    # what a warm cache serves is read after the run, in a process of its own (compile_checks.gate.warm_cache)
    own_cache = None if case.inductor_cache is None else os.fspath(case.inductor_cache)
    outcome.inductor_cache = planned.inductor_cache or own_cache
    if isinstance(floor, str):
        outcome.notes.append(floor)
    elif floor is not None:
        outcome.check_region_seconds, outcome.floor_region_seconds = floor
    return outcome


def _floor(planned: PlannedCase, case: Case) -> tuple[list[float], list[float]] | str:
    """``--floor``: seconds per region, (the check's, the floor's), or a note saying why there are none.

    Both are timed after the verdict's run, floor first, then the check again (its verdict is not
    used): the verdict's run paid what a first compile of this graph costs in this process (lazy
    imports, fake-tensor and decomposition caches that ``torch._dynamo.reset()`` keeps), which a floor
    timed after it would not. A failure here is a note, never the verdict's.
    """
    if not planned.analysis_only or planned.codegen_smoke:  # the floor stops after post-grad: no codegen
        return "--floor: not measured (a full compile; the floor stops after the post-grad passes)"
    if case.driver is not None and not case.check_writes:  # the Case's own word: its driver cannot run twice
        return "--floor: not measured (check_writes=False: the case's driver cannot run again)"
    try:
        floor = floor_run(case).region_seconds
        check = check_run(case).region_seconds
    except Exception as e:
        return f"--floor: a timing run failed: {_error_line(e)}"
    return check, floor


def _error_line(e: BaseException) -> str:
    """``Type: first line of the message``: one line per failure in the table."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


# Python's first-generation threshold is 700; see freeze_imported_heap
GC_THRESHOLDS = (20_000, 10, 10)
_OWNS_PROCESS = False  # see own_this_process


def own_this_process() -> None:
    """This process runs the gate and nothing else (the console script, ``python -m compile_checks``, a
    ``--jobs`` worker), so :func:`warm_up` tunes its garbage collector and, once vLLM is imported on a host
    without CUDA, the gate takes back vLLM's NVML-based CUDA check (``undo_nvml_cuda_check``).
    ``cli.main([...])`` called from a caller's own process (a test, a script) does not claim it: that
    collector and environment stay the caller's."""
    global _OWNS_PROCESS
    _OWNS_PROCESS = True


def warm_up(builtin: bool) -> None:
    """What the cases need, imported before the first one (so no case's timing carries it): the checker
    and the pipelines; for built-in cases also the scenarios' host loop and vLLM, which building one
    imports (after ``prepare_process_for_vllm``: the CLI's in this process, ``_worker_init``'s in a worker).
    Then, in a process the gate owns, :func:`freeze_imported_heap` and ``undo_nvml_cuda_check``."""
    import compile_checks.session

    if builtin:
        import compile_checks.scenarios.cases  # noqa: F401
    if _OWNS_PROCESS:
        freeze_imported_heap()
        undo_nvml_cuda_check()


def freeze_imported_heap() -> None:
    """The imported heap (torch, vLLM, the checker: ~600k objects) lives as long as the gate's process:
    ``gc.freeze()`` keeps the collector from walking it again, and a larger first generation collects the
    cases' young objects less often (GC over 15 built-in cases in one process: 1.5 s -> 0.5 s). Garbage
    is still collected, only less often; no full collection first: after the imports it takes 0.3 s and
    finds ~64 objects."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def has_builtin(cases: Sequence[PlannedCase]) -> bool:
    return any(c.source.kind == BUILTIN for c in cases)


__all__ = [
    "GC_THRESHOLDS",
    "CaseBuilder",
    "freeze_imported_heap",
    "has_builtin",
    "own_this_process",
    "run_planned",
    "warm_up",
]
