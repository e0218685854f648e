"""``compile-checks scan PATH...``: every graph's verdict as a gate outcome; table, ``--json``, JUnit, exit code.

One :class:`~compile_checks.gate.outcome.Outcome` per graph (label ``rank0 [0/0]``, group ``scan:PATH``,
``pipeline`` ``"trace"``: how the graph was compiled is not the scan's to know), and one per pool
that ``[tool.compile_checks.scan] pools`` judges; the gate's JSON document, JUnit writer and exit
codes (:func:`compile_checks.gate.commands.exit_code`) as they are. Exit 2: a PATH that is not
compile artifacts, a truncated trace (a payload cut short, a compile without its closing
``compilation_metrics``), or a ``--pools`` entry that matched no input of any graph; exit 4: a compile
that failed (``fail_type`` in its metrics) or logged no post-grad graph.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from compile_checks.errors import UnwritableOutput, UsageError
from compile_checks.gate.commands import check_writable_file, exit_code, stdout_gone
from compile_checks.gate.junit import write_junit
from compile_checks.gate.outcome import Outcome
from compile_checks.gate.outputs import failing_cell, json_document
from compile_checks.scan.artifacts import GraphArtifacts, ScanError
from compile_checks.scan.config import ScanConfig, load_scan_config
from compile_checks.scan.copies import GraphScan, scan_graph
from compile_checks.scan.folders import read_path
from compile_checks.scan.inputs import PoolMap, check_pools_match
from compile_checks.verdict import copy_names, render_copy
from compile_checks.vocab import ErrorKind, ExitCode

TRACE = "trace"  # the Outcome's pipeline column: the scan reads what any pipeline logged
# op namespaces whose registering module the scan imports itself when a graph calls them
KNOWN_OP_MODULES = {"ar_paging": "ar_paging", "compile_checks_scenarios": "compile_checks.scenarios.model"}


@dataclass(frozen=True)
class ScanRequest:
    paths: tuple[Path, ...]
    pools_file: Path | None = None
    config: Path | None = None
    junitxml: Path | None = None
    json: bool = False
    imports: tuple[str, ...] = ()


def _import(modules: Sequence[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise UsageError(f"--import {name}: {e}") from None


def _graph_outcome(s: GraphScan, config: ScanConfig) -> Outcome:
    art = s.graph
    judged_by_pool = [c for c in s.copies if c["pool"] in config.pools]
    own = [c for c in s.copies if c["pool"] not in config.pools]
    out = Outcome(
        label=art.label,
        group=f"scan:{art.origin}",
        pipeline=TRACE,
        expect_clean=config.expects_clean(art.compile_id, art.label),
        analysis_only=False,
        clean=None if s.error else not own,
        check_errors=list(s.problems),
        clones=own,
        other_clones=judged_by_pool,
        other_clones_counted=False,  # judged by their pool's row
        wall_seconds=s.seconds,
        notes=list(s.notes),
        report={
            "compile_id": art.compile_id,
            "rank": art.rank,
            "graph_index": art.index,
            "origin": art.origin,
            "served_from": list(art.served_from),
        },
    )
    for finding in s.findings:  # a failing finding, as the gate's run findings (compile_checks.findings reads it)
        kind, _, message = finding.partition(": ")
        out.report.setdefault("run_findings", []).append({"kind": kind, "message": message, "fails": True})
    if s.error:
        out.error, out.error_kind = s.error, ErrorKind.COMPILE
    return out


def _pool_outcomes(scans: Sequence[GraphScan], config: ScanConfig) -> list[Outcome]:
    out = []
    for pool, expect_clean in config.pools.items():
        copies = [c for s in scans for c in s.copies if c["pool"] == pool]
        out.append(
            Outcome(
                label=f"pool {pool}",
                group="scan:pools",
                pipeline=TRACE,
                expect_clean=expect_clean,
                analysis_only=False,
                clean=not copies,
                clones=copies,
            )
        )
    return out


def _bytes(copies: Sequence[dict[str, Any]]) -> str:
    static = sum(c["nbytes"] for c in copies if isinstance(c["nbytes"], int))
    symbolic = [str(c["nbytes"]) for c in copies if not isinstance(c["nbytes"], int)]
    return " + ".join(([str(static)] if static or not symbolic else []) + symbolic)


def _verdict(o: Outcome) -> str:
    if o.error is not None:
        return "[red]ERROR[/red]"
    cell = failing_cell(o.verdict)  # the gate's words for what fails (compile_checks.gate.outputs)
    if cell is not None:
        return cell
    if o.clean:
        return "clean"
    return escape(f"{len(o.clones)} copy(ies) {copy_names(o.clones)} {_bytes(o.clones)} B/call")


def print_scan(outcomes: Sequence[Outcome], code: int, seconds: float, notes: Sequence[str]) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    t = Table(title="compile-checks scan")
    for col in ("graph", "from", "verdict", "expected", "result"):
        t.add_column(col)
    for o in outcomes:
        origin = o.report.get("origin", "")
        t.add_row(
            escape(o.label),
            escape((Path(origin).name if origin else "-") + (" (cache)" if o.report.get("served_from") else "")),
            _verdict(o),
            "clean" if o.expect_clean else "copies",
            "[green]pass[/green]" if o.passed else "[red]FAIL[/red]",
        )
    console.print(t)
    for o in outcomes:
        # each finding once, as what it is (the verdict's words: compile_checks.verdict.failure_reasons)
        lines = [render_copy(c) for c in [*o.clones, *o.other_clones]]
        for line in lines + o.failure_reasons(copies_listed=True):
            console.print(f"  {o.label}: {line}", highlight=False, markup=False)
        for n in o.notes:
            console.print(f"  {o.label}: note: {n}", highlight=False, markup=False)
    for n in notes:
        console.print(f"note: {n}", highlight=False, markup=False)
    failed = sum(not o.passed for o in outcomes)
    console.print(f"{len(outcomes)} result(s), {failed} failed, in {seconds:.1f} s; exit {code}", highlight=False)


def scan_paths(paths: Sequence[Path], pools: PoolMap) -> list[GraphScan]:
    """Read every PATH, then scan every graph (library entry point; raises :class:`ScanError`)."""
    arts: list[GraphArtifacts] = []
    for p in paths:
        for a in read_path(p):
            a.scope = p.name if len(paths) > 1 else ""  # labels stay unique across PATHs
            arts.append(a)
    namespaces = {ns for a in arts for ns in KNOWN_OP_MODULES if a.post_grad and f"torch.ops.{ns}." in a.post_grad}
    _import([KNOWN_OP_MODULES[ns] for ns in sorted(namespaces)])
    return [scan_graph(a, pools, i) for i, a in enumerate(arts)]


def run_scan(req: ScanRequest) -> ExitCode:
    config = load_scan_config(req.config)
    pools = PoolMap.load(req.pools_file or config.pools_file)
    if req.junitxml is not None:
        check_writable_file(req.junitxml)
    _import(req.imports)
    t0 = time.perf_counter()
    try:
        scans = scan_paths(req.paths, pools)
    except ScanError as e:
        raise UsageError(str(e)) from None
    check_pools_match(pools, [s.graph for s in scans], config.pools)
    outcomes = [_graph_outcome(s, config) for s in scans] + _pool_outcomes(scans, config)
    notes = [] if pools.names else ["no --pools mapping: copies name graph inputs by their source, not by pool"]
    seconds = time.perf_counter() - t0
    code = exit_code(outcomes)
    if req.junitxml is not None:
        try:
            write_junit(outcomes, req.junitxml, seconds)
        except OSError as e:
            raise UnwritableOutput(f"cannot write {req.junitxml}: {e.strerror or e}") from None
    try:
        if req.json:
            print(json_document(outcomes, code, seconds, notes))
        else:
            print_scan(outcomes, code, seconds, notes)
    except BrokenPipeError:
        stdout_gone()
    return code


__all__ = ["ScanRequest", "print_scan", "run_scan", "scan_paths"]
