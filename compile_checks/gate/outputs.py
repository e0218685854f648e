"""What the gate prints: the verdict table, the ``--timings`` table, and the ``--json`` document.

``--json`` is a contract for CI scripts: ``schema_version`` changes whenever a key is renamed
or removed or its meaning changes (adding keys keeps it). Version 2: ``{"schema_version", "exit_code",
"seconds", "notes", "cases": [Outcome.to_dict(), ...]}``, plus ``shard`` (``gate --shard``) or ``merged``
(``merge``); each case carries ``findings`` (every :class:`compile_checks.findings.Finding`, copies, lost
writes, undecided regions, notes) and ``verdict`` (what they come to), and its ``check_errors`` hold only
what the findings' report does not (version 1 listed every failing finding there as a string).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from compile_checks.check.recompiles import graphs_cell
from compile_checks.explain.grouping import alike, group_explanations
from compile_checks.findings import UNDECIDED_KINDS, Verdict, kind_name
from compile_checks.gate.outcome import EagerCompared, Outcome
from compile_checks.verdict import bytes_per_call, copy_names, render_copy
from compile_checks.vocab import PHASES, FindingKind

SCHEMA_VERSION = 2


def _esc(text: str) -> str:
    """Case labels and messages are the user's text: ``split[codegen]`` is not rich markup."""
    return escape(text)


def json_document(
    outcomes: Sequence[Outcome], code: int, seconds: float, notes: Sequence[str], extra: Mapping[str, Any] | None = None
) -> str:
    """The ``--json`` document; ``extra``: top-level keys added (``shard`` / ``merged``: compile_checks.gate.shard)."""
    return json.dumps(
        {
            "schema_version": SCHEMA_VERSION,
            "exit_code": code,
            "seconds": round(seconds, 2),
            "notes": list(notes),
            "cases": [o.to_dict() for o in outcomes],
            **(extra or {}),
        },
        indent=2,
        default=str,
    )


def _console() -> Any:
    console = Console()
    if not console.is_terminal:  # piped / CI logs: COLUMNS when set, else 160 (not squeezed to 80)
        columns = os.environ.get("COLUMNS", "")
        console = Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else 160)
    return console


def failing_cell(verdict: Verdict) -> str | None:
    """The verdict cell when a finding fails the case whatever it expects: its kinds (``lost_write``,
    ``too_many_recompiles`` ...), else ``undecided``; None when none does (compiled != eager has its column)."""
    failing = [f for f in verdict.failing if f.kind != FindingKind.MISMATCH]
    decided = sorted({kind_name(f) for f in failing if f.kind not in UNDECIDED_KINDS or "reported_kind" in f.details})
    if decided:
        return f"[red]{_esc(', '.join(decided))}[/red]"
    return "[red]undecided[/red]" if failing else None


def _verdict(o: Outcome) -> str:
    if o.error is not None:
        return "[red]ERROR[/red]"
    cell = failing_cell(o.verdict)
    if cell is not None:
        return cell
    if o.ranked:  # a ranked case: the merged verdict (compile_checks.ranks.merge)
        return _esc(o.report["verdict"])
    if o.clean:
        return "clean"
    per_run = o.report.get("clone_bytes_per_run")
    run = f"\n{per_run} B/run" if per_run is not None else ""
    # a line per part: a narrow column folds between them, never inside a pool name
    return _esc(f"{len(o.clones)} clone(s)\n{copy_names(o.clones)}\n{bytes_per_call(o.clones)}{run}")


def _eager(o: Outcome) -> str:
    if o.eager_match is None:
        return "-"
    cell = "yes" if o.eager_match else f"[red]NO ({o.max_abs_diff:.2e})[/red]"
    # analysis-only ran the post-grad graph: a codegen miscompile is not in this comparison (gate --full)
    return f"{cell}\n{POST_GRAD_MARK}" if o.eager_compared == EagerCompared.POST_GRAD else cell


POST_GRAD_MARK = "(post-grad)"
POST_GRAD_CAPTION = f"{POST_GRAD_MARK}: eager was compared with the {EagerCompared.POST_GRAD} (gate --full runs it)"


def verdict_table(outcomes: Sequence[Outcome], title: str) -> Any:
    post_grad = any(o.eager_compared == EagerCompared.POST_GRAD for o in outcomes)
    t = Table(title=title, caption=POST_GRAD_CAPTION if post_grad else None, caption_justify="left")
    # the verdict's longest line (its pool names) whole where it can be (at most 40 columns)
    widest = max((len(line) for o in outcomes for line in _verdict(o).splitlines()), default=0)
    # two-line headers where a column's cells are narrower than its name: the table fits 100 columns with the
    # verdict's pool names whole
    for col in ("case", "pipeline", "mode", "verdict", "expect", "eager==\ncompiled", "graphs", "result", "wall\ns"):
        # a narrow terminal folds the case label and the verdict (pool names, bytes) rather than cut them off
        t.add_column(
            col,
            overflow="fold" if col in ("case", "verdict") else "ellipsis",
            min_width=min(widest, 40) if col == "verdict" else None,
        )
    for o in outcomes:
        t.add_row(
            _esc(o.label),
            o.pipeline,
            "analysis" if o.analysis_only else "full",
            _verdict(o),
            "clean" if o.expect_clean else "clones",
            _eager(o),
            graphs_cell(o.report.get("recompiles", {})),  # compile_checks.check.recompiles
            "[green]pass[/green]" if o.passed else "[red]FAIL[/red]",
            f"{o.wall_seconds:.1f}",
        )
    return t


def timings_table(outcomes: Sequence[Outcome]) -> Any:
    """Per case: seconds in each compile phase (summed over its regions), compile total (dynamo's tracing
    and the backend's phases), the rest of the wall (running the case and ``verify``), wall."""
    t = Table(title="timings (s)")
    for col in ("case", *PHASES, "compile", "run+verify", "wall"):
        t.add_column(col, justify="right" if col != "case" else "left")
    totals = dict.fromkeys((*PHASES, "compile", "rest", "wall"), 0.0)
    for o in outcomes:
        # compile_seconds is the backend's (aot onwards); dynamo traces before it, so it is added here
        compile_total = o.compile_seconds + (o.phase_seconds.get("dynamo") or 0.0)
        rest = max(0.0, o.wall_seconds - compile_total)
        cells = []
        for p in PHASES:
            v = o.phase_seconds.get(p)
            cells.append("n/a" if v is None else f"{v:.2f}")
            totals[p] += v or 0.0
        totals["compile"] += compile_total
        totals["rest"] += rest
        totals["wall"] += o.wall_seconds
        t.add_row(_esc(o.label), *cells, f"{compile_total:.2f}", f"{rest:.2f}", f"{o.wall_seconds:.2f}")
    has_phases = any(o.phase_seconds for o in outcomes)
    t.add_row(
        "[bold]total[/bold]",
        *(f"{totals[p]:.2f}" if has_phases else "n/a" for p in PHASES),
        f"{totals['compile']:.2f}",
        f"{totals['rest']:.2f}",
        f"{totals['wall']:.2f}",
    )
    return t


def floor_table(outcomes: Sequence[Outcome]) -> Any:
    """``--floor``: per case and compiled region, the check's compile seconds beside the floor's (plain
    ``torch.compile`` stopped after the post-grad passes), one run each; ``None`` when none was measured."""
    measured = [o for o in outcomes if o.floor_region_seconds or o.check_region_seconds]
    if not measured:
        return None
    t = Table(title="per region: the check vs its floor (s, one run each)")
    for col in ("case", "region", "floor", "check", "check / floor"):
        t.add_column(col, justify="right" if col != "case" else "left")

    def ratio(check: float, floor: float) -> str:
        return f"{check / floor:.2f}x" if floor > 0 else "n/a"

    for o in measured:
        floor, check = o.floor_region_seconds, o.check_region_seconds
        for i in range(max(len(floor), len(check))):
            f = f"{floor[i]:.3f}" if i < len(floor) else "-"  # a region one run compiled and the other did not
            c = f"{check[i]:.3f}" if i < len(check) else "-"
            both = i < len(floor) and i < len(check)
            t.add_row(_esc(o.label), str(i), f, c, ratio(check[i], floor[i]) if both else "n/a")
        t.add_row(_esc(o.label), "total", f"{sum(floor):.3f}", f"{sum(check):.3f}", ratio(sum(check), sum(floor)))
    return t


def _causes(copies: Sequence[Mapping[str, Any]]) -> str:
    """The explanations' causes (``shared_storage``, ``read_after_write`` ...), each once, in first-seen order."""
    causes = [str(c["explanation"]).split(":", 1)[0] for c in copies if c.get("explanation")]
    return ", ".join(dict.fromkeys(causes)) or "not explained"


def control_line(o: Outcome) -> str:
    """A negative control that still clones, as expected: one line (its copies, their bytes, their cause)."""
    copies = [*o.clones, *o.other_clones]
    return (
        f"negative control still clones as expected: {len(copies)} cop{'y' if len(copies) == 1 else 'ies'} of "
        f"{copy_names(copies)}, {bytes_per_call(copies)}; cause {_causes(copies)} (--verbose explains each)"
    )


def case_lines(o: Outcome, verbose: bool = False) -> list[str]:
    """What the gate prints under the table for one case.

    A negative control that passed (it still clones, as expected): one line, :func:`control_line`.
    Otherwise (a failure, ``verbose``, or a clean case's copies of other inputs): each surviving copy,
    each explanation once per group of copies it explains alike (``layers 0-2: ...``; ``verbose``:
    every copy with its own), why the case failed, and a dump failure."""
    copies = [*o.clones, *o.other_clones]
    dump_failures = [f"dump failed (the verdict stands): {f}" for f in o.report.get("dump_failures", [])]
    # the program's own pool-sized buffers: traffic, listed here unless they fail the case (then a reason below)
    program = [f for f in o.verdict.findings if f.kind == FindingKind.PROGRAM_COPY and not f.fails]
    dump_failures = [*(f"program copy: {f.message}" for f in program), *dump_failures]
    if o.passed and not o.expect_clean and copies and not verbose:
        return [control_line(o), *dump_failures]
    keys = [alike(c["explanation"]) if c.get("explanation") else "" for c in copies]
    shared = set() if verbose else {k for k, n in Counter(k for k in keys if k).items() if n > 1}
    lines = [render_copy({**c, "explanation": None}) if k in shared else render_copy(c) for c, k in zip(copies, keys)]
    grouped = [(c["pool"], c["explanation"]) for c, k in zip(copies, keys) if k in shared]
    lines += [f"{label} ({count} copies): {text}" for label, text, count in group_explanations(grouped)]
    lines += o.failure_reasons(copies_listed=True)
    return lines + dump_failures


def print_results(
    outcomes: Sequence[Outcome],
    *,
    title: str,
    code: int,
    seconds: float,
    notes: Sequence[str],
    timings: bool,
    verbose: bool = False,
) -> None:
    console = _console()
    console.print(verdict_table(outcomes, title))
    for o in outcomes:
        for line in case_lines(o, verbose):
            console.print(f"  {o.label}: {line}", highlight=False, markup=False, soft_wrap=True)
    for n in notes:
        console.print(f"note: {n}", highlight=False, markup=False, soft_wrap=True)
    if timings:
        console.print(timings_table(outcomes))
    floors = floor_table(outcomes)
    if floors is not None:
        console.print(floors)
    failed = sum(not o.passed for o in outcomes)
    console.print(f"{len(outcomes)} case(s), {failed} failed, in {seconds:.1f} s; exit {code}", highlight=False)


__all__ = [
    "SCHEMA_VERSION",
    "case_lines",
    "control_line",
    "failing_cell",
    "floor_table",
    "json_document",
    "print_results",
    "timings_table",
    "verdict_table",
]
