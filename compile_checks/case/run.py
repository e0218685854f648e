""":func:`run_case`, the one way a case is run, and the :class:`CaseResult` it (or a plugin session) yields.

Apart from the :class:`~compile_checks.case.definition.Case` dataclass because running needs the
checker (imported lazily, inside the functions), and apart from :mod:`.run_findings` (whether the
write check is on, recompiles).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compile_checks import verdict
from compile_checks.case.definition import Case
from compile_checks.case.run_findings import checks_writes, run_findings
from compile_checks.case.without_values import values_needed, without_values
from compile_checks.findings import Verdict, verdict_of
from compile_checks.pipelines import compile_for_pipeline, resolve
from compile_checks.vocab import EagerCompared

if TYPE_CHECKING:  # the checker imports torch: loading a case file must stay cheap
    from compile_checks.check.findings import CloneReport
    from compile_checks.no_values import NoValues
    from compile_checks.session import CloneCheck


@dataclass
class CaseResult:
    """What :func:`run_case` (or a plugin session) found for one case.

    The names are the gate's own: the same words are keys of each case in ``compile-checks gate --json``
    and properties of each ``<testcase>`` in its JUnit XML.

    Attributes:
        case: the :class:`~compile_checks.case.definition.Case` that ran.
        report: the checker's :class:`~compile_checks.check.findings.CloneReport` (every surviving copy,
            mutated argument, region and note).
        output: what the case's function (or its ``driver``) returned on the checked run.
        compile_seconds: seconds the backend spent compiling (summed over the compiled regions).
        wall_seconds: the whole case, compile, run and ``verify``.
        analysis_only: Inductor stopped after its post-grad passes (no C++ codegen).
        eager_match: compiled == eager by the case's ``verify``; None when it has none.
        max_abs_diff: the difference ``verify`` measured; None when it has none.
        notes: what the run noted besides the verdict (the report's own notes are in ``report.notes``).

    Properties: :attr:`clean` (no copy survived), :attr:`expect_clean`, :attr:`pipeline`,
    :attr:`check_errors`, :attr:`verdict_met`, :attr:`passed`, :attr:`check_passed`, :attr:`eager_compared`.
    """

    case: Case
    report: CloneReport
    output: Any = None
    compile_seconds: float = 0.0
    wall_seconds: float = 0.0
    analysis_only: bool = False
    eager_match: bool | None = None  # None: the case has no ``verify``
    max_abs_diff: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """No pool copy survived, neither of a named pool nor of another mutated input (``CloneReport.clean``)."""
        return self.report.clean

    @property
    def eager_compared(self) -> EagerCompared | None:
        """What :attr:`eager_match` compared eager with (the post-grad graph analysis-only); None: nothing."""
        if self.eager_match is None:
            return None
        return EagerCompared.POST_GRAD if self.analysis_only else EagerCompared.GENERATED

    @property
    def expect_clean(self) -> bool:
        """What the case expects under the pipeline it ran: clean, or (a negative control) a surviving copy."""
        return self.case.expects_clean

    @property
    def pipeline(self) -> str:
        """The pipeline the case was compiled through (``stock``, ``vllm``, ``vllm-piecewise``)."""
        return str(self.case.pipeline)

    @property
    def verdict(self) -> Verdict:
        """Every finding of the run (copies, writes, recompiles, undecided regions, compiled != eager, notes)
        and what they come to against the case's expectation: computed once, here, by the registered
        finders (:mod:`compile_checks.findings`); everything below reads it."""
        evidence = self.report.evidence(notes=self.notes, eager_match=self.eager_match, max_abs_diff=self.max_abs_diff)
        return verdict_of(evidence, expect_clean=self.case.expects_clean)

    @property
    def check_errors(self) -> list[str]:
        """What kept the check from a verdict besides copies (errors, unanalysed regions, failing run findings)."""
        return list(self.report.problems)

    @property
    def check_passed(self) -> bool:
        """No pool copy, no check error, nothing unanalysed (unless the case allows it)."""
        return self.report.check_passed

    @property
    def verdict_met(self) -> bool:
        """The copy verdict is ``case.expects_clean``, and nothing but compiled != eager fails."""
        return self.verdict.verdict_met

    @property
    def passed(self) -> bool:
        """The verdict met, and the compiled run matched eager (when checked)."""
        return self.verdict.passed

    def failure_reasons(self, copies_listed: bool = False) -> list[str]:
        """Why the case did not pass (:func:`verdict.failure_reasons` of :attr:`verdict`); empty when it passed."""
        report = self.report
        return verdict.failure_reasons(
            self.verdict,
            copies=[verdict.copy_fields(c) for c in [*report.clones, *report.other_clones]],
            copies_listed=copies_listed,
            pipeline=self.case.pipeline,
        )


def check_session(
    case: Case, *, analysis_only: bool = False, dump_dir: str | None = None, values: NoValues | None = None
) -> CloneCheck:
    """The (not yet entered) check session ``case`` is compiled under: its pools, and the pipeline's
    settings with the case's overrides (:func:`compile_checks.pipelines.resolve`); ``values``: the case
    has none (:func:`~compile_checks.case.without_values.without_values`)."""
    from compile_checks.session import CloneCheck  # lazy: it imports torch; loading a case file stays torch-free

    settings = resolve(case)
    return CloneCheck(
        check_writes=checks_writes(case),
        pools=case.pools if callable(case.pools) else (dict(case.pools) or None),
        functionalization=settings.functionalization,
        dump_dir=dump_dir,
        inductor_config=settings.inductor_config,
        analysis_only=analysis_only,
        allow_unanalysed=case.allow_unanalysed,
        values=values,
    )


def case_result(case: Case, check: CloneCheck, output: Any, *, started: float) -> CaseResult:
    """The result of ``case`` once ``check`` has closed: its report, and compiled == eager via ``verify``."""
    report = check.report
    assert report is not None, "case_result needs a closed check session"
    report.output = output
    result = CaseResult(
        case=case,
        report=report,
        output=output,
        compile_seconds=sum(r.compile_seconds for r in check.probe.regions),
        analysis_only=check.probe.analysis_only,
    )
    if case.verify is not None and check.no_values is None:  # no values: nothing to compare
        matches, diff = case.verify(output)
        result.eager_match, result.max_abs_diff = bool(matches), float(diff)
    result.wall_seconds = time.perf_counter() - started
    if report.dump_dir is not None:  # the dump's index says the case's verdict (its expectation, eager, recompiles)
        from compile_checks.explain.dumps import write_index  # lazy: it imports torch

        write_index(report, report.dump_dir, result.verdict)
    return result


def run_case(
    case: Case,
    *,
    analysis_only: bool = False,
    dump_dir: str | None = None,
) -> CaseResult:
    """Compile ``case.fn`` under the clone check through ``case.pipeline``, run it, report.

    ``analysis_only`` stops Inductor after its post-grad passes (no C++ codegen) and runs
    that graph: the same verdict at a fraction of the cost.

    A case built on ``meta`` or under ``FakeTensorMode`` gets the analysis-only verdict, its meta tensors
    compiled as FakeTensors; the write checks, ``verify`` and a full compile are skipped with one note.
    """
    started = time.perf_counter()
    case, values = without_values(case)  # the one place the case is read for values
    check = check_session(case, analysis_only=analysis_only, dump_dir=dump_dir, values=values)
    if case.reset is not None:
        case.reset()
    with values_needed(values), check:
        compiled = compile_for_pipeline(
            check,
            case.fn,
            case.pipeline,
            dynamic=case.dynamic,
            fullgraph=case.fullgraph,
            mode=case.mode,
            engine_compile=case.compile,
        )
        with case.grad_mode():
            output = case.driver(compiled) if case.driver is not None else compiled(*case.args, **dict(case.kwargs))
    assert check.report is not None
    check.report.run_findings += run_findings(case, check.report)
    return case_result(case, check, output, started=started)


__all__ = ["CaseResult", "case_result", "check_session", "run_case"]
