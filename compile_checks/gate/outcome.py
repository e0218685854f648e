"""What one planned case came to: an :class:`Outcome`, plain data only.

An :class:`Outcome` holds no tensors and no functions so it crosses a process boundary (``--jobs N``:
:mod:`compile_checks.gate.runner`'s spawned workers return them) and feeds the table, ``--json`` and
the JUnit writer alike. A case that failed to compile carries its error instead of a verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from compile_checks.findings import Evidence, Finding, Verdict, collect_findings
from compile_checks.verdict import copy_fields, failure_reasons, render_copy
from compile_checks.vocab import PHASES, EagerCompared, ErrorKind, FindingKind, Pipeline

if TYPE_CHECKING:
    from compile_checks.case import CaseResult
    from compile_checks.gate.plan import PlannedCase
    from compile_checks.ranks import RankedResult


@dataclass
class Outcome:
    """What one planned case came to (plain data).

    Attributes:
        label: the case's name in this run, unique (``fused``, ``fused[vllm]`` when several pipelines run
            it): the table's row, the JUnit test name, the dump folder.
        group: where the case comes from and its pipeline, ``<target>/<pipeline>`` (``builtin/<pipeline>``
            for the built-in cases): the JUnit classname.
        pipeline: the pipeline the case was compiled with (``Pipeline``); a scan's rows say ``trace``.
        expect_clean: the case expects no surviving pool copy under this pipeline (False: a negative control).
        analysis_only: the check stopped Inductor after its post-grad passes (no C++ codegen; same verdict).
        codegen_smoke: a built-in case compiled fully (C++ codegen) as the gate's smoke test.
        description: the case's own one-line description (``Case.description``).
        clean: no pool copy survived (None: the case reached no verdict, see ``error``).
        check_errors: what kept the check from a verdict that the report does not hold (a codegen smoke case
            without ``verify``, a warm-cache run that failed, a scan's refusal); the report's own errors,
            regions, writes and recompiles are findings (:attr:`findings`).
        eager_match: the case's ``verify`` found compiled == eager (None: the case has no ``verify``).
        max_abs_diff: the largest absolute difference ``verify`` measured against eager (None: not measured).
        clones: each surviving copy of a named pool (the keys below: op, argument, pool, bytes, where, why).
        other_clones: surviving copies of mutated inputs that match no named pool (same keys as ``clones``).
        phase_seconds: seconds per compile phase, summed over the case's regions (keys: the ``Phase`` values).
        compile_seconds: seconds the backend spent compiling (AOT onwards, every region).
        wall_seconds: seconds the whole case took: compiling, running its driver, ``verify``.
        notes: caveats of the run and of the analysis (never a failure by themselves).
        report: the full report, ``CloneReport.to_dict()`` (below); a ranked case: its merged ranks.
        error: why the case reached no verdict (a compile or run error), else None.
        error_kind: the kind of that error (``ErrorKind``: it sets the exit code), else None.
        retargeted_from: the case's own pipeline when the gate re-ran its expectation under another one.
        pipeline_verdicts: pipeline -> clean for the same case under every pipeline of this run.
        rank_failures: a ranked case: ``rank N: why`` for each rank that missed its own expectation.
        check_region_seconds: ``--floor``: the check's compile seconds per region, beside the floor's.
        floor_region_seconds: ``--floor``: the floor's compile seconds per region (plain ``torch.compile``
            stopped after the post-grad passes).
        inductor_cache: the Inductor cache folder the case was also run against (``--inductor-cache``).
    """

    label: str
    group: str
    pipeline: Pipeline | str  # a Pipeline; a scan's rows say "trace" (compile_checks.scan: any pipeline logged it)
    expect_clean: bool
    analysis_only: bool
    codegen_smoke: bool = False
    description: str = ""
    clean: bool | None = None  # None: the case did not run to a verdict (see ``error``)
    check_errors: list[str] = field(default_factory=list)  # undecided, outside the report (Evidence.undecided)
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
    # pipeline -> clean of the same case in this run (set by the gate: :func:`note_pipeline_verdicts`)
    pipeline_verdicts: dict[str, bool] = field(default_factory=dict)
    # a ranked case (compile_checks.ranks): ``rank N: why`` for each rank that missed its own expectation
    rank_failures: list[str] = field(default_factory=list)
    # ``--floor``: seconds per compiled region, the check's compile and the floor's (plain torch.compile
    # stopped after the post-grad passes: compile_checks.case.floor), one run each
    check_region_seconds: list[float] = field(default_factory=list)
    floor_region_seconds: list[float] = field(default_factory=list)
    # the Inductor cache folder this case is also run against (``--inductor-cache``, ``Case.inductor_cache``):
    # compile_checks.gate.warm_cache fills ``report["inductor_cache"]`` after the run
    inductor_cache: str | None = None
    # whether ``other_clones`` count toward this row's copy verdict (a scan judges them per pool: False)
    other_clones_counted: bool = True

    @property
    def ranked(self) -> bool:
        """A ranked case: its copies are judged rank by rank (``rank_failures``), not against ``expect_clean``."""
        return "ranks" in self.report

    def evidence(self) -> Evidence:
        """What the finders read of this outcome (plain data: the same in a worker, a shard's JSON, a scan)."""
        return Evidence(
            report=self.report,
            copies=self.clones,
            other_copies=self.other_clones,
            undecided=self.check_errors,
            notes=self.notes,
            eager_match=self.eager_match,
            max_abs_diff=self.max_abs_diff,
        )

    @property
    def findings(self) -> list[Finding]:
        """Every finding of the case (:func:`compile_checks.findings.collect_findings`); copies of
        ``other_clones`` count unless ``other_clones_counted`` is False (a scan judges them per pool)."""
        found = collect_findings(self.evidence())
        if self.other_clones_counted:
            return found
        other = [f for f in found if f.is_copy and f.details.get("unnamed_input")]
        return [dataclasses.replace(f, fails=False) if f in other else f for f in found]

    @property
    def verdict(self) -> Verdict:
        """What the findings come to against the expectation: computed once (:class:`Verdict`); every output
        renders it. A ranked case's copies are judged per rank: its verdict expects what it found."""
        findings = self.findings
        if self.ranked:
            return Verdict.of(findings, expect_clean=not any(f.is_copy and f.fails for f in findings))
        return Verdict.of(findings, expect_clean=self.expect_clean)

    @property
    def verdict_met(self) -> bool:
        """The copy verdict is what the case expects, from a usable check (:attr:`Verdict.verdict_met`)."""
        return self.error is None and not self.rank_failures and self.verdict.verdict_met

    @property
    def passed(self) -> bool:
        """:attr:`verdict_met`, and compiled == eager where checked (:attr:`Verdict.passed`)."""
        return self.error is None and not self.rank_failures and self.verdict.passed

    def failure_reasons(self, copies_listed: bool = False) -> list[str]:
        """Why the case failed (the error, else :func:`verdict.failure_reasons` of :attr:`verdict`); empty
        when it passed."""
        if self.error is not None:
            return [self.error]
        verdict = self.verdict
        if self.rank_failures:  # each rank against its own expectation; then compiled == eager, merged
            copies = [] if copies_listed else [render_copy(c) for c in [*self.clones, *self.other_clones]]
            return [*self.rank_failures, *copies, *(f.message for f in verdict.of_kind(FindingKind.MISMATCH))]
        return failure_reasons(
            verdict,
            copies=[*self.clones, *self.other_clones],
            copies_listed=copies_listed,
            pipeline=self.pipeline,
            retargeted_from=self.retargeted_from,
            observed=self.pipeline_verdicts,
        )

    @property
    def eager_compared(self) -> EagerCompared | None:
        """What :attr:`eager_match` compared eager against; None when nothing was compared."""
        if self.eager_match is None:
            return None
        return EagerCompared.POST_GRAD if self.analysis_only else EagerCompared.GENERATED

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        compared = self.eager_compared
        verdict = self.verdict
        d.update(
            verdict_met=self.verdict_met,
            passed=self.passed,
            eager_compared=compared and str(compared),
            findings=[f.to_dict() for f in verdict.findings],
            verdict=verdict.to_dict(),
        )
        return d


def _case_key(o: Outcome) -> tuple[str, str]:
    """The case behind an outcome, whatever pipeline it ran under: its target (``group`` without the
    pipeline) and its name (``label`` without ``[pipeline]``: ``plan.pipeline_label``'s suffix)."""
    return o.group.rsplit("/", 1)[0], o.label.removesuffix(f"[{o.pipeline}]")


def note_pipeline_verdicts(outcomes: Sequence[Outcome]) -> None:
    """Give each outcome the verdicts (pipeline -> clean) its case reached under every pipeline of this
    run (the gate's, or ``merge``'s shards together): a failure's hint then states only what the run showed."""
    by_case: dict[tuple[str, str], dict[str, bool]] = {}
    for o in outcomes:
        if o.clean is not None and o.error is None:
            by_case.setdefault(_case_key(o), {})[str(o.pipeline)] = o.clean
    for o in outcomes:
        o.pipeline_verdicts = dict(by_case.get(_case_key(o), {}))


def _phase_totals(report: Any) -> dict[str, float]:
    per_region = report.region_phase_seconds
    totals = dict.fromkeys(PHASES, 0.0) if per_region else {}
    for phases in per_region.values():
        for k, v in phases.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    return totals


def outcome_from_result(planned: PlannedCase, result: CaseResult) -> Outcome:
    report = result.report
    out = Outcome(
        label=planned.label,
        group=planned.group,
        pipeline=planned.pipeline,
        expect_clean=planned.expect_clean,
        analysis_only=result.analysis_only,
        codegen_smoke=planned.codegen_smoke,
        description=result.case.description,
        clean=bool(report.clean),
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


__all__ = ["Outcome", "note_pipeline_verdicts", "outcome_from_ranked", "outcome_from_result"]
