"""pytest plugin (entry point ``compile_checks``): the ``pool_clone_check`` fixture and its marker.

    import pytest
    from compile_checks import Case

    @pytest.mark.compile_checks(analysis_only=True)      # verdict only: no C++ codegen
    def test_step(pool_clone_check):
        pool_clone_check.check(Case("split", step, args=(k, v, x, slots), pools={"layer0.k": k, "layer0.v": v}))

    def test_host_loop(pool_clone_check):               # an engine loop that calls the step many times
        with pool_clone_check.session(pools={"layer0.k": k, "layer0.v": v}) as s:
            step = s.compile(step_fn)
            for chunk in chunks:
                step(k, v, chunk, slots)

    def test_old_style(pool_clone_check):               # the first API, still supported
        pool_clone_check.assert_no_pool_clones(step, k, v, x, slots, pools={"layer0.k": k, "layer0.v": v})

``check(case)`` runs the case through :func:`compile_checks.case.run_case` (the one path the
CLI uses too) and fails the test unless the case met its expectation (a negative control
``expect_clean=False`` must still clone); ``session`` is a case too, opened with the same
:func:`~compile_checks.case.check_session` and judged by the same ``CaseResult``.
Analysis-only mode: the ``check``/``session``
argument, else the marker's ``analysis_only``, else ``--compile-checks-analysis-only``.

Dumps are written on request or on failure, under ``tmp_path/compile_checks/check<N>``:
``--keep-compile-dumps`` runs every check under depyf and keeps its dump; otherwise no depyf runs,
and a failing check gets the check's own dump (captured, post-grad and generated code per
region, ``index.md``: :func:`compile_checks.explain.dumps.write_dump`), named in the failure
message with each clone's ``file:line``. A dump that fails is a note, never the test's failure.

Loading the plugin imports no torch (``compile_checks.case`` is torch-free; the checker,
``compile_checks.session``, is imported when a check first runs): a test session that never asks
for the fixture pays nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from compile_checks.case import Case, CaseResult, case_result, check_session, run_case
from compile_checks.gate.log_capture import torch_trace_uncaptured
from compile_checks.pipelines import compile_for_pipeline
from compile_checks.vocab import Pipeline

if TYPE_CHECKING:  # only for annotations: importing them at load time would import torch
    import torch

    from compile_checks.check.findings import CloneReport
    from compile_checks.session import CloneCheck

MARKER = "compile_checks"
MARKER_KWARGS = ("analysis_only",)
_MARKER_HELP = (
    f"{MARKER}(analysis_only=False): options of the pool_clone_check fixture for this test; "
    "analysis_only=True stops Inductor after its post-grad passes (same verdict, no C++ codegen)"
)


def _marker_options(node: pytest.Item | None) -> dict[str, Any]:
    """The merged kwargs of every ``compile_checks`` marker on the test (closest wins)."""
    __tracebackhide__ = True  # a bad marker fails with its message, not the plugin's frames
    options: dict[str, Any] = {}
    if node is None:
        return options
    for mark in reversed(list(node.iter_markers(MARKER))):  # farthest first, so the closest overrides
        if mark.args:
            raise ValueError(
                f"@pytest.mark.{MARKER} takes keyword arguments only ({', '.join(MARKER_KWARGS)}), got {mark.args!r}"
            )
        unknown = sorted(set(mark.kwargs) - set(MARKER_KWARGS))
        if unknown:
            raise ValueError(
                f"@pytest.mark.{MARKER}: unknown argument(s) {', '.join(unknown)}; valid: {', '.join(MARKER_KWARGS)}"
            )
        options.update(mark.kwargs)
    if "analysis_only" in options and not isinstance(options["analysis_only"], bool):
        raise ValueError(f"@pytest.mark.{MARKER}(analysis_only=...) must be a bool, got {options['analysis_only']!r}")
    return options


def _case_failure(result: CaseResult) -> str:
    """Why a case did not pass (:meth:`CaseResult.failure_reasons`: each failing finding once, with its cause
    and fix), then each copy with its explanation, the notes and the dump: nothing said twice."""
    from compile_checks.explain.report_text import copy_lines, dump_lines  # lazy: they import torch

    name = result.case.name
    verdict = result.verdict
    lines = [f"case {name!r}: {why}" for why in result.failure_reasons(copies_listed=True)]
    lines += (
        copy_lines(result.report)
        + [f"note: {f.message}" for f in verdict.notes if f.details.get("what") != "dump_failure"]
        + dump_lines(result.report)
    )
    return "\n".join(line for line in lines if line)


def _session_body(*args: Any, **kwargs: Any) -> Any:
    """``Case.fn`` of a session: the steps are the ones the test compiles inside the ``with`` block."""
    raise TypeError("a pool_clone_check.session case is not run by run_case: compile its steps with session.compile")


class CheckSession:
    """``pool_clone_check.session(...)``: a :class:`~compile_checks.session.CloneCheck` for host loops.

    ``compile(fn)`` compiles through the session's pipeline; every call the loop makes is
    observed. ``report`` is set when the ``with`` block ends.
    """

    def __init__(self, check: CloneCheck, pipeline: Pipeline) -> None:
        self.check = check
        self.pipeline = pipeline

    def compile(self, fn: Callable[..., Any], dynamic: bool = False) -> Callable[..., Any]:
        return compile_for_pipeline(self.check, fn, self.pipeline, dynamic=dynamic)

    @property
    def report(self) -> CloneReport | None:
        return self.check.report


class PoolCloneCheck:
    """What the fixture returns: the library checks, with dumps under the test's tmp_path."""

    def __init__(self, root: Path, keep: bool, analysis_only: bool = False) -> None:
        self.root = root
        self.keep = keep
        self.analysis_only = analysis_only  # from the marker, else the command-line option
        self.reports: list[CloneReport] = []
        self.results: list[CaseResult] = []
        self._n = 0

    def _next_dir(self) -> Path:
        d = self.root / f"check{self._n}"
        self._n += 1
        return d

    def _dump_dir(self, dump: Path) -> str | None:
        """Where depyf dumps this check: only on request (``--keep-compile-dumps``)."""
        return str(dump) if self.keep else None

    def _finish(self, report: CloneReport, dump: Path, failure: Callable[[], str] | None) -> None:
        """Raise with the failure message and the dump (written now from the check's records when
        depyf did not run), or leave a passing check's requested dump."""
        __tracebackhide__ = True  # pytest shows the test's own line, not the plugin's frames and their reports
        if failure is None:
            return
        if report.dump_dir is None:
            from compile_checks.explain.dumps import write_dump  # lazy: it imports torch

            write_dump(report, str(dump), fallback=True)
        raise AssertionError(f"{failure()}\ndumps kept at {dump}")

    def _record(self, result: CaseResult, dump: Path) -> CaseResult:
        """Keep the result; fail the test unless it passed (:attr:`CaseResult.passed`)."""
        __tracebackhide__ = True  # pytest shows the test's own line, not the plugin's frames and their reports
        self.results.append(result)
        self.reports.append(result.report)
        self._finish(result.report, dump, None if result.passed else lambda: _case_failure(result))
        return result

    def check(self, case: Case, *, analysis_only: bool | None = None) -> CaseResult:
        """Run ``case`` with :func:`~compile_checks.case.run_case`; fail the test unless it met its expectation."""
        __tracebackhide__ = True  # pytest shows the test's own line, not the plugin's frames and their reports
        if not isinstance(case, Case):
            raise ValueError(f"check(case): case must be a compile_checks.Case, got {type(case).__name__}")
        mode = self.analysis_only if analysis_only is None else analysis_only
        dump = self._next_dir()
        return self._record(run_case(case, analysis_only=mode, dump_dir=self._dump_dir(dump)), dump)

    def session(
        self,
        pools: Mapping[str, torch.Tensor] | None = None,
        *,
        expect_clean: bool = True,
        pipeline: Pipeline | str = Pipeline.STOCK,
        functionalization: str | None = None,
        inductor_config: Mapping[str, Any] | None = None,
        analysis_only: bool | None = None,
    ) -> SessionBlock:
        """A check around a host loop: ``with ...session(pools=...) as s: step = s.compile(fn); ...``.

        The session is a :class:`~compile_checks.case.Case` named ``"session"`` whose steps are the
        ones the block compiles: it is validated, compiled and judged as ``check(case)`` is (the same
        :func:`~compile_checks.case.check_session` and :class:`~compile_checks.case.CaseResult`).
        On leaving the block the test fails unless the verdict is ``expect_clean``.
        """
        case = Case(
            "session",
            _session_body,
            pools=dict(pools or {}),
            expect_clean=expect_clean,
            pipeline=pipeline,  # type: ignore[arg-type]  # Case validates a name and coerces it
            functionalization=functionalization,  # type: ignore[arg-type]  # likewise
            inductor_config=dict(inductor_config or {}),
        )
        mode = self.analysis_only if analysis_only is None else analysis_only
        return SessionBlock(self, case, mode)

    def analyze(
        self, fn: Callable[..., Any], *args: Any, pools: Mapping[str, torch.Tensor] | None = None, **kwargs: Any
    ) -> CloneReport:
        """``analyze_pool_clones`` with a dump dir under tmp_path (kept)."""
        from compile_checks.api import analyze_pool_clones  # lazy: api imports torch, the plugin loads without it

        report = analyze_pool_clones(fn, *args, pools=pools, dump_dir=self._next_dir(), **kwargs)
        self.reports.append(report)
        return report

    def assert_no_pool_clones(
        self, fn: Callable[..., Any], *args: Any, pools: Mapping[str, torch.Tensor] | None = None, **kwargs: Any
    ) -> CloneReport:
        """Fail the test (AssertionError with file:line of each clone) unless the check passed."""
        __tracebackhide__ = True  # pytest shows the test's own line, not the plugin's frames and their reports
        from compile_checks.api import analyze_pool_clones, format_report  # lazy: api imports torch

        dump = self._next_dir()
        report = analyze_pool_clones(fn, *args, pools=pools, dump_dir=self._dump_dir(dump), **kwargs)
        self.reports.append(report)
        self._finish(report, dump, None if report.check_passed else lambda: format_report(report))
        return report


class SessionBlock:
    """The ``with`` block of :meth:`PoolCloneCheck.session`: a class, not a generator, so that a failing
    verdict raised on leaving the block shows the test's line, not ``contextlib``'s frames."""

    def __init__(self, owner: PoolCloneCheck, case: Case, analysis_only: bool) -> None:
        self.owner, self.case, self.analysis_only = owner, case, analysis_only
        self.dump = owner._next_dir()
        self.started = 0.0
        self.check: CloneCheck | None = None

    def __enter__(self) -> CheckSession:
        self.started = time.perf_counter()
        self.check = check_session(
            self.case, analysis_only=self.analysis_only, dump_dir=self.owner._dump_dir(self.dump)
        )
        self.check.__enter__()
        return CheckSession(self.check, self.case.pipeline)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        __tracebackhide__ = True  # pytest shows the test's own line, not the plugin's frames and their reports
        assert self.check is not None
        self.check.__exit__(exc_type, exc, tb)
        if exc_type is None:
            self.owner._record(case_result(self.case, self.check, None, started=self.started), self.dump)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compile_checks")
    group.addoption(
        "--keep-compile-dumps",
        action="store_true",
        default=False,
        help="dump every pool_clone_check check with depyf and keep it (default: a dump of failing checks only)",
    )
    group.addoption(
        "--compile-checks-analysis-only",
        action="store_true",
        default=False,
        help="pool_clone_check: stop Inductor after its post-grad passes (same verdict, no C++ codegen) "
        "unless a test's marker says otherwise",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)


# trylast: inside pytest's own logging wrapper, which has attached its handlers by then
@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    __tracebackhide__ = True
    with torch_trace_uncaptured():
        return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    __tracebackhide__ = True
    with torch_trace_uncaptured():
        return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    __tracebackhide__ = True
    with torch_trace_uncaptured():
        return (yield)


@pytest.fixture
def pool_clone_check(tmp_path: Path, request: pytest.FixtureRequest) -> PoolCloneCheck:
    """Checks that compiled code leaves no functionalization clone of the named pools."""
    __tracebackhide__ = True
    keep = bool(request.config.getoption("--keep-compile-dumps", default=False))
    analysis_only = bool(request.config.getoption("--compile-checks-analysis-only", default=False))
    options = _marker_options(request.node if isinstance(request.node, pytest.Item) else None)
    return PoolCloneCheck(tmp_path / "compile_checks", keep, options.get("analysis_only", analysis_only))
