"""A report in words: what ``assert_no_pool_clones`` raises with, what the plugin prints under a failing
case. Copies with their explanations (said once for copies explained alike), then each failing finding
once, with its cause and fix (:func:`compile_checks.findings.finding_lines`)."""

from __future__ import annotations

from collections import Counter

from compile_checks.check.findings import CloneReport, SurvivingClone
from compile_checks.explain.grouping import alike, group_explanations
from compile_checks.findings import finding_lines
from compile_checks.verdict import bytes_per_call, copy_fields, render_copy


def format_report(report: CloneReport, verbose: bool = False) -> str:
    """Human-readable summary of a report (what ``assert_no_pool_clones`` raises with): every failure.

    Copies explained alike (differing only in layer numbers and bytes) share one explanation,
    ``layers 0-2: why ...``; ``verbose`` prints each copy's own in full. A dump that failed is a
    note: the verdict stands.
    """
    dumps = dump_lines(report)
    if report.check_passed:
        allowed = f" ({len(report.unanalysed)} unanalysed part(s) allowed)" if report.unanalysed else ""
        head = f"no surviving pool clones in {report.num_regions} compiled region(s){allowed}"
        return "\n".join([head, *dumps])
    lines = copy_lines(report, verbose)
    failing = report.verdict.failing  # each failing finding once, its cause and fix after it
    if failing:
        lines.append("findings that fail the check:")
        lines += [f"  {line}" for line in finding_lines(failing)]
    return "\n".join(lines + dumps)


def copy_lines(report: CloneReport, verbose: bool = False) -> list[str]:
    """Each surviving copy's line, its explanation in full below it, or said once for copies explained alike
    (``layers 0-2: why ...``; ``verbose``: every copy's own)."""
    lines: list[str] = []
    shared = set() if verbose else _shared([*report.clones, *report.other_clones])
    if report.clones:
        lines.append(
            f"{len(report.clones)} pool copy(ies) survived Inductor's reinplace pass "
            f"({bytes_per_call([{'region': c.region, 'node': c.node, 'nbytes': c.nbytes} for c in report.clones])}, "
            f"{report.clone_bytes_per_run} bytes over the "
            f"{sum(report.region_calls.values())} region call(s) of this run):"
        )
        lines += _copies(report.clones, shared)
    if report.other_clones:
        lines.append(f"{len(report.other_clones)} copy(ies) of a mutated caller tensor that matches no named pool:")
        lines += _copies(report.other_clones, shared)
    lines += _shared_explanations([*report.clones, *report.other_clones], shared)
    return lines


def dump_lines(report: CloneReport) -> list[str]:
    """Where the dump is, and a dump that failed (an artifact only: the verdict stands)."""
    lines = [f"dump failed (an artifact only: the verdict stands): {f}" for f in report.dump_failures]
    if report.dump_dir:
        fallback = " (with the check's own graph files where depyf wrote none)" if report.dump_failures else ""
        lines.append(f"graph dumps: {report.dump_dir} (see index.md){fallback}")
    return lines


def _text(c: SurvivingClone) -> str:
    return "\n".join(c.explanation.lines()) if c.explanation is not None else ""


def _shared(clones: list[SurvivingClone]) -> set[str]:
    """The explanations (:func:`alike` keys) several copies share, among every copy of the report."""
    return {key for key, n in Counter(alike(t) for t in map(_text, clones) if t).items() if n > 1}


def _copies(clones: list[SurvivingClone], shared: set[str]) -> list[str]:
    """Each copy's line; its explanation in full below it unless several copies share it (``shared``: said once,
    after every copy's line, by :func:`_shared_explanations`)."""
    return [_copy_lines(c) if alike(_text(c)) not in shared else "  - " + _copy_line(c) for c in clones]


def _shared_explanations(clones: list[SurvivingClone], shared: set[str]) -> list[str]:
    """An explanation several copies share (differing only in layers, pools, bytes and regions), once
    (``layers 0-2 (3 copies, explained alike; worded for the first)``)."""
    lines = []
    grouped = [(c.pool, t) for c, t in zip(clones, map(_text, clones)) if t and alike(t) in shared]
    for label, text, count in group_explanations(grouped):
        lines.append(f"  {label} ({count} copies, explained alike; worded for the first):")
        lines += [f"      {line}" for line in text.splitlines()]
    return lines


def _copy_line(c: SurvivingClone) -> str:
    return render_copy({**copy_fields(c), "explanation": None})  # the summary: in full below


def _copy_lines(c: SurvivingClone) -> str:
    """The copy's line (:func:`compile_checks.verdict.render_copy`), then its explanation in full."""
    text = "  - " + _copy_line(c)
    if c.explanation is not None:
        text += "".join(f"\n      {line}" for line in c.explanation.lines())
    return text


__all__ = ["copy_lines", "dump_lines", "format_report"]
