"""The check session: :class:`CloneCheck` patches Inductor, compiles regions through the instrumented
backend, and builds the report (with its explanations and dump) on exit.

Every way a case is checked goes through it: :func:`compile_checks.case.run_case`, the pytest plugin's
sessions, the pipelines, and the public one-call functions of :mod:`compile_checks.api` (a facade
over this module that no core module imports: an import-linter contract).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from compile_checks.check.attribution import build_report
from compile_checks.check.backend import Probe, instrumented_inductor
from compile_checks.check.findings import CloneReport
from compile_checks.check.frozen_pools import FrozenPoolLog, frozen_pool_names, watching_frozen_pools
from compile_checks.check.recompile_limit import (
    LimitLog,
    limit_findings,
    limit_message,
    raised_by_limit,
    watching_recompile_limit,
)
from compile_checks.check.recompiles import RecompileLog, recompile_table, recording_reasons
from compile_checks.check.trace_artifacts import log_findings
from compile_checks.check.writes.calls import SCAN_CALLS, CallWriteCheck
from compile_checks.check.writes.regions import RegionWriteWatch
from compile_checks.errors import CompileChecksError, UsageError
from compile_checks.explain.culprit_pass import PostGradRecorder
from compile_checks.explain.depyf_dump import DepyfDump
from compile_checks.explain.dumps import write_dump
from compile_checks.explain.explanations import explain_report
from compile_checks.no_values import NoValues, Storage, no_values
from compile_checks.pools import PoolNamingError, PoolsArg, resolve_pools


class CompileCheckError(CompileChecksError, RuntimeError):
    """``fn`` could not be compiled (or run) under the check; ``__cause__`` is the original error.

    ``phase`` is "compile" when torch.compile itself failed (a dynamo/backend error), "run" when
    the user's code raised while running (a ``ValueError`` of its own is no compile failure).
    """

    def __init__(self, message: str, phase: str = "compile") -> None:
        super().__init__(message)
        self.phase = phase


class CloneCheck:
    """One check session: patches Inductor, compiles regions, builds the report on exit.

    Usage::

        with CloneCheck(pools={"layer0.k": k0, ...}) as check:
            step = check.compile(step_fn)
            for ...: step(...)
        report = check.report
    """

    def __init__(
        self,
        pools: PoolsArg = None,
        functionalization: str = "v2",
        dump_dir: str | os.PathLike[str] | None = None,
        inductor_config: Mapping[str, Any] | None = None,
        analysis_only: bool = False,
        allow_unanalysed: bool = False,
        explain: bool = True,
        values: NoValues | None = None,
        check_writes: bool = False,
    ) -> None:
        # a callable is kept and re-read (refresh_pools) so an engine that rebuilds its cache is followed
        self.pools_source = pools
        self.pools = resolve_pools(pools) or None
        # pools (or, from run_case / analyze_pool_clones, the case's tensors) without values: analysis-only,
        # no write checks, one note (compile_checks.no_values)
        self.no_values = values or no_values(self.pools)
        if self.no_values is not None:
            if self.no_values.storage == Storage.META and not self.no_values.converted:
                raise UsageError(
                    "the pools are on meta: run_case / analyze_pool_clones compile a meta model as FakeTensors; "
                    "with CloneCheck itself, build the model and pools under one FakeTensorMode"
                )
            if not analysis_only:
                self.no_values.skip("the full compile (its generated code cannot run without values)")
            analysis_only = True
        # accept regions the check could not analyse (a backward graph, a HOP subgraph ...)
        self.allow_unanalysed = allow_unanalysed
        self.inductor_config = dict(inductor_config or {})
        self.functionalization = functionalization
        self.dump_dir = str(Path(dump_dir).resolve()) if dump_dir is not None else None
        # analysis_only: dynamo + AOT + Inductor's post-grad passes run (so the verdict is the same),
        # lowering and C++ codegen do not; the post-grad FX graph itself is executed
        self.probe = Probe(analysis_only=analysis_only)
        self.probe.set_pools(self.pools)
        if callable(pools) and not isinstance(pools, Mapping):
            self.probe.pools_provider = lambda: resolve_pools(pools)
        # writes an opaque op makes without declaring them, and recompiles (compile_checks.check.writes/recompiles)
        if self.no_values is None:
            self.probe.write_watch = RegionWriteWatch(self.pools, self.probe.received_pools)
            # check_writes: each compiled call against its own captured graph run eagerly (lost writes); the full
            # mode (generated code, the correctness mode) scans every call for writes eager did not make
            if check_writes:
                scan_calls = SCAN_CALLS if analysis_only else None
                self.probe.call_writes = CallWriteCheck(
                    lambda: self.probe.pool_tensors, self._region_label, scan_calls=scan_calls
                )
        self.recompile_log = RecompileLog()
        self.limit_log = (
            LimitLog()
        )  # compiles dynamo refused for its recompile limit (compile_checks.check.recompile_limit)
        # explain: record why each clone survived (compile_checks.explain.explanations); re-runs passes only for clones
        self.explain_recorder = (
            PostGradRecorder(lambda: len(self.probe.regions) - 1, keep_code=self.dump_dir is not None)
            if explain
            else None
        )
        # pools freezing=True made constants of a region (compile_checks.check.frozen_pools)
        self.frozen_log = FrozenPoolLog()
        self.report: CloneReport | None = None
        self.depyf: DepyfDump | None = None  # the guarded depyf session while dumping (its failures)
        self._stack: contextlib.ExitStack | None = None

    def _region_label(self, index: int) -> str:
        """``region 2 (forward, blocks_dit.py:127)``: a region as write-check messages name it."""
        region = self.probe.regions[index] if index < len(self.probe.regions) else None
        code = region.code if region is not None else ""
        return f"region {index} ({code})" if code else f"region {index}"

    def _pools_touched(self, t: torch.Tensor) -> list[str]:
        return self.probe.pools.touched(t) if self.probe.pools else []

    def _compiling_region(self) -> int | None:
        """The region compiling now (the backend appends it before Inductor runs)."""
        return len(self.probe.regions) - 1 if self.probe.regions else None

    @property
    def backend(self) -> Callable[..., Any]:
        """The check's dynamo backend: hand it to the engine's own compile calls inside the session
        (``torch.compile(block.forward, backend=check.backend, fullgraph=True)``, vLLM-Omni's
        ``regionally_compile(model, backend=check.backend)``); every region it compiles is analysed.
        One object per check, returned unchanged by ``copy.deepcopy`` (transformers' ``CompileConfig``
        deep-copies its backend): :mod:`compile_checks.check.backend_object`."""
        return self.probe.backend

    def compile(
        self, fn: Callable[..., Any], dynamic: bool | None = False, *, fullgraph: bool = False, mode: str | None = None
    ) -> Callable[..., Any]:
        """``torch.compile(fn)`` through the instrumented backend; errors become CompileCheckError."""
        compiled = torch.compile(fn, backend=self.probe.backend, dynamic=dynamic, fullgraph=fullgraph, mode=mode)

        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return compiled(*args, **kwargs)
            except CompileCheckError:
                raise
            except Exception as e:
                if isinstance(e, torch._dynamo.exc.TorchDynamoException):
                    raise CompileCheckError(f"torch.compile of {callable_name(fn)} failed: {first_line(e)}") from e
                raise CompileCheckError(
                    f"{callable_name(fn)} raised under the check: {first_line(e)}{_where(e)}", phase="run"
                ) from e

        return run

    def __enter__(self) -> CloneCheck:
        if self.dump_dir is not None:
            _prepare_dump_dir(self.dump_dir)
        stack = contextlib.ExitStack().__enter__()
        try:
            # instrumentation outermost: its dynamo reset must come after depyf wrote full_code_*
            stack.enter_context(instrumented_inductor(self.probe, self.functionalization, self.inductor_config))
            stack.enter_context(recording_reasons(self.recompile_log))
            stack.enter_context(watching_recompile_limit(self.limit_log))
            stack.enter_context(watching_frozen_pools(self.frozen_log, self._pools_touched, self._compiling_region))
            if self.explain_recorder is not None:
                stack.enter_context(self.explain_recorder.active())
            if self.dump_dir is not None:
                self.depyf = DepyfDump(self.dump_dir)
                stack.enter_context(self.depyf.active())
            if self.no_values is not None:  # what the session runs makes FakeTensors too (compile_checks.no_values)
                stack.enter_context(self.no_values.mode)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._stack is not None
        self._stack.__exit__(exc_type, exc, tb)
        self._stack = None
        unread = None
        if exc_type is None:
            try:  # the pools after the last call: did that call replace one (pool_replaced)?
                self.probe.refresh_pools()
            except PoolNamingError as e:
                unread = f"the pools could not be re-read after the last call ({e}): a replacement by it is not seen"
        self.pools = self.probe.pool_tensors or None  # the last ones read (a pools callable follows rebuilds)
        self.probe.received_pools |= frozen_pool_names(self.frozen_log)  # reached, as constants: pool_folded says so
        report = build_report(self.probe, self.pools, self.dump_dir, allow_unanalysed=self.allow_unanalysed)
        report.notes += [unread] if unread else []
        report.recompiles = recompile_table(self.probe.regions, self.recompile_log)
        if self.probe.write_watch is not None:
            report.run_findings += self.probe.write_watch.findings()
        if self.probe.call_writes is not None:
            report.run_findings += self.probe.call_writes.findings()
            report.errors += self.probe.call_writes.errors
            report.notes += [n for n in self.probe.call_writes.notes if n not in report.notes]
        if self.no_values is not None:
            report.notes.append(self.no_values.note())
        raised = raised_by_limit(exc)
        report.run_findings += limit_findings(self.limit_log, raised=raised)
        report.run_findings += self.frozen_log.findings(self._region_label)
        report.notes += self.limit_log.notes
        report.notes += self.probe.restarts + self.probe.compile_failures  # compile_checks.check.backend
        report = explain_report(report, self.probe, self)
        if self.dump_dir is not None:
            report.dump_failures = list(self.depyf.failures) if self.depyf is not None else []
            report = write_dump(report, self.dump_dir, fallback=bool(report.dump_failures))
        log_findings(report, self.probe.regions)  # TORCH_TRACE: each region's findings beside its graphs
        self.report = report
        if raised and self.limit_log.hits:  # dynamo's "Hard failure due to fullgraph=True", explained
            raise CompileCheckError(limit_message(self.limit_log.hits[0], raised=True)) from exc


def callable_name(fn: Callable[..., Any]) -> str:
    """``fn``'s qualified name for an error message (modules and other callables: their type)."""
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


_USER_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _where(e: BaseException) -> str:
    """`` at file.py:LINE`` (the user's innermost line dynamo names under "from user code"), and, when autograd
    was on, what that means: an engine's step runs under ``torch.no_grad()`` (``Case.no_grad``, the default)."""
    text = str(e)
    frames = _USER_FRAME.findall(text.split("from user code:", 1)[1]) if "from user code:" in text else []
    where = f" at {Path(frames[-1][0]).name}:{frames[-1][1]}" if frames else ""
    if torch.is_grad_enabled():
        where += (
            " (autograd was on while the step ran: parameters or inputs that require grad make dynamo trace a "
            "training graph; an engine runs inference under torch.no_grad(), which a Case does unless "
            "Case(no_grad=False))"
        )
    return where


def first_line(e: BaseException) -> str:
    """``Type: message`` of the innermost cause (dynamo wraps the real error in several layers)."""
    root: BaseException = e
    seen: set[int] = set()
    while id(root) not in seen:
        seen.add(id(root))
        inner = getattr(root, "inner_exception", None) or root.__cause__
        if inner is None:
            break
        root = inner
    text = str(root).strip()
    first = text.splitlines()[0] if text else ""
    # dynamo's fake-tensor errors carry the op's own error as "... got ValueError('...')"
    m = re.search(r"got (\w+(?:Error|Exception))\((['\"])(.*?)\2\)", text)
    if m:
        return f"{type(root).__name__}: {first} ({m.group(1)}: {m.group(3)})"
    return f"{type(root).__name__}: {first}" if first else type(root).__name__


def _prepare_dump_dir(path: str) -> None:
    """Create the dump folder or fail early with a clear OSError (the CLI maps it to exit 3)."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    if not os.access(p, os.W_OK):
        raise PermissionError(f"dump dir {p} is not writable")


__all__ = ["CloneCheck", "CompileCheckError", "callable_name", "first_line"]
