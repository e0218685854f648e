"""depyf dumps of a check, and an index.md that points at the graphs and the clone lines.

depyf 0.20 (``depyf.prepare_debug(dir)``) writes, per compiled region ``__compiled_fn_N``:

* ``__compiled_fn_N.BEFORE_PRE_GRAD.0.py``: the dynamo-captured graph;
* ``__compiled_fn_N.Forward_graph.0.py``: the AOT functionalized graph (``auto_functionalized*``);
* ``__compiled_fn_N.AFTER_POST_GRAD.0.py``: the final post-grad graph (after reinplacing and
  ``decompose_auto_functionalized``): a surviving clone is an ``aten.clone`` line here;
* ``__compiled_fn_N.kernel_0.py``: Inductor's generated code;
* plus ``__transformed_code_*_for_<fn>.py`` / ``full_code_for_<fn>_0.py`` (dynamo bytecode, decompiled).

Detection never reads these files; they only give each clone a ``file:line``.

When a clone survives, the check also writes, per post-grad graph ``k`` of a region (even in
analysis-only mode, where depyf writes no post-grad file):

* ``__compiled_fn_N.BEFORE_REINPLACE.k.py``: the graph as Inductor's reinplace pass received it
  (``auto_functionalized*`` nodes, in the order the earlier passes left);
* ``__compiled_fn_N.POST_GRAD.k.py``: the graph after every post-grad pass (the clones are here);

and ``index.md`` shows, for each clone, its explanation and the lines around the write, the
clone and the conflicting read in both files side by side, with links to the user's source lines.

A dump is an artifact, never a cause of failure: when depyf fails (:mod:`compile_checks.explain.depyf_dump`)
or is not run (the pytest plugin's dump of a failing check), :func:`write_fallback_files` writes each
region's captured graph, post-grad graph(s) and generated code from what the check recorded
(``CloneReport.sources``) under the same names, where depyf wrote none.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compile_checks.check.backend import Probe
from compile_checks.check.findings import CloneReport, RegionSources, SurvivingClone
from compile_checks.check.graph.fx_helpers import node_line
from compile_checks.explain.user_source import absolute_path
from compile_checks.findings import Verdict, finding_lines, kind_name
from compile_checks.verdict import bytes_per_call
from compile_checks.vocab import FindingKind

FILE_KINDS: dict[str, str] = {
    "captured": "BEFORE_PRE_GRAD",
    "functionalized": "Forward_graph",
    "post_grad": "AFTER_POST_GRAD",
    "kernel": "kernel",
    # written by this module when a clone survives (see write_explained_graphs)
    "before_reinplace": "BEFORE_REINPLACE",
    "post_grad_fx": "POST_GRAD",
}


def _files(dump_dir: Path, fn_name: str, kind: str) -> list[Path]:
    sep = "_" if kind == "kernel" else "."
    return sorted(dump_dir.glob(f"{fn_name}.{kind}{sep}*.py"))


def region_files(dump_dir: Path, fn_name: str) -> dict[str, str | None]:
    """The dump files of one region ``__compiled_fn_N`` (first of each kind; None if none was written)."""
    out: dict[str, str | None] = {}
    for key, kind in FILE_KINDS.items():
        found = _files(dump_dir, fn_name, kind)
        out[key] = str(found[0]) if found else None
    return out


def write_fallback_files(
    report: CloneReport, dump_dir: str, kinds: Sequence[str] = ("captured", "post_grad", "kernel")
) -> list[Path]:
    """Each region's captured graph, post-grad graph(s) and generated code (``kinds`` of them), from
    ``report.sources``, for every kind no file was written for (depyf's names: ``region_files`` finds
    them). Returns the paths."""
    root = Path(dump_dir)
    root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def write(name: str, code: str) -> None:
        path = root / name
        path.write_text(code.lstrip("\n"))
        written.append(path)

    for src in report.sources.values():
        fn = src.compiled_fn_name
        if "captured" in kinds and src.captured and not _files(root, fn, FILE_KINDS["captured"]):
            write(f"{fn}.{FILE_KINDS['captured']}.0.py", src.captured)
        post_grad = _files(root, fn, FILE_KINDS["post_grad"]) or _files(root, fn, FILE_KINDS["post_grad_fx"])
        if "post_grad" in kinds and not post_grad:
            for k, code in enumerate(src.post_grad):
                write(f"{fn}.{FILE_KINDS['post_grad_fx']}.{k}.py", code)
        if "kernel" in kinds and not _files(root, fn, FILE_KINDS["kernel"]):
            for k, code in enumerate(src.generated):
                write(f"{fn}.{FILE_KINDS['kernel']}_{k}.py", code)
    return written


def _locate(dump_dir: Path, fn_name: str, node: str) -> tuple[str | None, int | None]:
    files = _files(dump_dir, fn_name, FILE_KINDS["post_grad"])
    files += _files(dump_dir, fn_name, FILE_KINDS["post_grad_fx"])  # analysis-only dumps
    for path in files:
        line = node_line(path.read_text(), node)
        if line is not None:
            return str(path), line
    return None, None


def annotate_report(report: CloneReport, dump_dir: str) -> CloneReport:
    """Fill ``graph_file``/``line`` of each clone and ``report.region_files`` from the dump."""
    root = Path(dump_dir)
    by_index: dict[int, RegionSources] = report.sources

    def locate(c: SurvivingClone) -> SurvivingClone:
        region = by_index.get(c.region)
        if region is None:
            return c
        path, line = _locate(root, region.compiled_fn_name, c.node)
        return dataclasses.replace(c, graph_file=path, line=line)

    report.clones = [locate(c) for c in report.clones]
    report.other_clones = [locate(c) for c in report.other_clones]
    report.region_files = {i: region_files(root, r.compiled_fn_name) for i, r in by_index.items()}
    return report


def _rel(path: str | None, root: Path) -> str:
    if path is None:
        return "(not written)"
    try:
        return f"`{Path(path).relative_to(root)}`"
    except ValueError:
        return f"`{path}`"


def _verdict_line(verdict: Verdict, report: CloneReport) -> str:
    """The index's headline: what the case's findings come to (:class:`compile_checks.findings.Verdict`)."""
    failing = [f for f in verdict.failing if f.kind != FindingKind.MISMATCH]
    if failing:
        kinds = ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in Counter(map(kind_name, failing)).items())
        return f"FAILS: {kinds} (see 'findings that fail the case' below)"
    if report.clean:
        return "CLEAN: every mutated pool argument was re-inplaced"
    calls = [{"region": c.region, "node": c.node, "nbytes": c.nbytes} for c in report.clones]
    return (
        f"{len(report.clones)} surviving pool clone(s), {bytes_per_call(calls)} (one call of a region copies its "
        f"own clones only), {report.clone_bytes_per_run} bytes over this run's region calls"
    )


def render_index(report: CloneReport, dump_dir: str, verdict: Verdict | None = None) -> str:
    """Markdown index: the verdict, each failing finding with its cause and fix, then per region its files,
    its mutated arguments, its surviving clones. ``verdict``: the case's (its expectation, compiled == eager,
    recompiles), else the report's own (:attr:`CloneReport.verdict`)."""
    root = Path(dump_dir)
    verdict = verdict if verdict is not None else report.verdict
    failing = [f for f in verdict.failing if not f.is_copy]
    lines = [
        "# compile_checks dump index",
        "",
        f"Verdict: **{_verdict_line(verdict, report)}**.",
        "",
        "Files per region (depyf 0.20 names): captured = dynamo graph, functionalized = AOT graph with "
        "`auto_functionalized*`, post_grad = final graph after reinplace + decomposition (clones show up "
        "here), kernel = Inductor output code.",
        "",
    ]
    if failing:
        listed = [f"  - {line.strip()}" if line.startswith(" ") else f"- {line}" for line in finding_lines(failing)]
        lines += ["## findings that fail the case", "", *listed, ""]
    if report.dump_failures:
        lines += ["## dump failures (the verdict stands)", ""] + [f"- {f}" for f in report.dump_failures] + [""]
    for index, region in sorted(report.sources.items()):
        files = report.region_files.get(index) or region_files(root, region.compiled_fn_name)
        lines += [
            f"## `{region.compiled_fn_name}` (region {index})",
            "",
            f"- calls: {report.region_calls.get(index, 0)}; kernel bytes (Inductor metrics): "
            f"{report.region_kernel_bytes.get(index, 0)}; compile: {region.compile_seconds:.2f} s",
        ]
        lines += [f"- {key}: {_rel(files.get(key), root)}" for key in FILE_KINDS]
        args = [m for m in report.mutated_args if m.region == index]
        if args:
            lines.append("- mutated arguments:")
            lines += [
                f"  - `{m.op}` `{m.arg}` (pool {m.pool or '-'}): {'re-inplaced' if m.reinplaced else 'CLONED'}"
                for m in args
            ]
        clones = [c for c in report.clones + report.other_clones if c.region == index]
        if clones:
            lines.append("- surviving clones:")
            for c in clones:
                where = f"{_rel(c.graph_file, root)}:{c.line}" if c.graph_file else "(line not found)"
                lines.append(
                    f"  - node `{c.node}` -> `{c.op}` `{c.arg}` (pool {c.pool or '-'}): {c.nbytes} bytes "
                    f"{list(c.shape)} {str(c.dtype).removeprefix('torch.')}{_calls(c)} at {where}"
                )
            for c in clones:
                if c.explanation is not None:
                    lines += render_explanation(c, root)
        else:
            lines.append("- surviving clones: none")
        lines.append("")
    if report.notes:
        lines += ["## notes", ""] + [f"- {n}" for n in report.notes] + [""]
    return "\n".join(lines)


def _calls(c: SurvivingClone) -> str:
    """On how many calls the copy ran with this pool and size (each call is charged only its own)."""
    bound = ", an upper bound" if c.upper_bound else ""
    return f" on {c.calls} call(s){bound}" if c.calls is not None else bound


def write_index(report: CloneReport, dump_dir: str, verdict: Verdict | None = None) -> Path:
    path = Path(dump_dir) / "index.md"
    path.write_text(render_index(report, dump_dir, verdict))
    return path


def write_dump(report: CloneReport, dump_dir: str, *, fallback: bool) -> CloneReport:
    """The dump's last step: the fallback files (``fallback``: depyf failed or did not run), then
    ``file:line`` of each clone and ``index.md``. Sets ``report.dump_dir``.

    depyf writes no post-grad graph when Inductor stops after its post-grad passes (analysis-only):
    each region's ``POST_GRAD`` file is written from the check's records then, clean regions' too."""
    write_fallback_files(report, dump_dir, kinds=("captured", "post_grad", "kernel") if fallback else ("post_grad",))
    report.dump_dir = dump_dir
    report = annotate_report(report, dump_dir)
    write_index(report, dump_dir)
    return report


# ---- explained graphs: BEFORE_REINPLACE / POST_GRAD files and the side-by-side excerpts ----------

_EXCERPT_WIDTH = 72
_COMPACT = (
    (re.compile(r";\s+[\w, =]+= None$"), ""),  # the "x = y = None" frees after each statement
    (re.compile(r"torch\.ops\.higher_order\."), ""),
    (re.compile(r"torch\.ops\."), ""),
    (re.compile(r"\.default\b"), ""),
)


def write_explained_graphs(
    report: CloneReport, records: Sequence[Any], dump_dir: str, probe: Probe
) -> tuple[list[SurvivingClone], list[SurvivingClone]]:
    """Write BEFORE_REINPLACE / POST_GRAD files of the graphs with clones; point each explanation at them."""
    root = Path(dump_dir)
    names = {r.index: r.compiled_fn_name for r in probe.regions}
    written: dict[tuple[int, int], dict[str, str]] = {}
    for rec in records:
        if not rec.refusals or rec.region not in names:
            continue
        files: dict[str, str] = {}
        for key, kind, code in (
            ("before_reinplace", "BEFORE_REINPLACE", rec.before_reinplace),
            ("post_grad", "POST_GRAD", rec.post_grad),
        ):
            if code:
                path = root / f"{names[rec.region]}.{kind}.{rec.ordinal}.py"
                path.write_text(code.lstrip("\n"))
                files[key] = str(path)
        written[(rec.region, rec.ordinal)] = files

    def point(c: SurvivingClone) -> SurvivingClone:
        e = c.explanation
        if e is None:
            return c
        rec = next(
            (r for r in records if r.region == c.region and any(x.node == e.write_node for x in r.refusals)), None
        )
        files = written.get((rec.region, rec.ordinal), {}) if rec is not None else {}
        return dataclasses.replace(c, explanation=dataclasses.replace(e, graph_files=files)) if files else c

    return [point(c) for c in report.clones], [point(c) for c in report.other_clones]


def _compact(line: str) -> str:
    text = line.rstrip()
    for pat, sub in _COMPACT:
        text = pat.sub(sub, text)
    return text


def excerpt(source: str, nodes: Sequence[str], context: int = 1) -> list[tuple[int | None, str, bool]]:
    """(line number, compacted text, is a key line) around each node's line; ``None`` rows are gaps."""
    src = source.splitlines()
    keys = {n for n in (node_line(source, name) for name in nodes) if n is not None}
    wanted = sorted({i for k in keys for i in range(k - context, k + context + 1) if 1 <= i <= len(src)})
    rows: list[tuple[int | None, str, bool]] = []
    prev = None
    for i in wanted:
        if prev is not None and i != prev + 1:
            rows.append((None, "...", False))
        rows.append((i, _compact(src[i - 1]), i in keys))
        prev = i
    return rows


def _cells(row: tuple[int | None, str, bool] | None) -> list[str]:
    """One excerpt line as the column's lines, ``_EXCERPT_WIDTH`` wide: a context line is cut with ``~``;
    a key line (the write, the clone, a conflicting read) is never cut, it goes on under itself."""
    if row is None:
        return [""]
    lineno, text, key = row
    head = f"{'>' if key else ' '}{lineno:>4} " if lineno is not None else "      "
    body = text.strip()
    room = _EXCERPT_WIDTH - len(head)
    if len(body) <= room:
        return [head + body]
    if not key:
        return [head + body[: room - 1] + "~"]
    return [(head if i == 0 else " " * len(head)) + body[i : i + room] for i in range(0, len(body), room)]


def side_by_side(
    left: list[tuple[int | None, str, bool]], right: list[tuple[int | None, str, bool]], titles: tuple[str, str]
) -> list[str]:
    """Two excerpts as fixed-width columns (a fenced block reads the same in a terminal and a browser)."""
    out = [
        "```text",
        f"{titles[0]:<{_EXCERPT_WIDTH}} | {titles[1]}",
        f"{'-' * _EXCERPT_WIDTH}-+-{'-' * _EXCERPT_WIDTH}",
    ]
    for i in range(max(len(left), len(right))):
        a = _cells(left[i] if i < len(left) else None)
        b = _cells(right[i] if i < len(right) else None)
        for j in range(max(len(a), len(b))):
            out.append(f"{a[j] if j < len(a) else '':<{_EXCERPT_WIDTH}} | {b[j] if j < len(b) else ''}".rstrip())
    out.append("```")
    return out


def _source_link(location: str | None, root: Path) -> str:
    """``[file:line](relative/path#Lline)`` to the user's source when the file exists, else plain text."""
    if not location:
        return "(no stack trace)"
    path = absolute_path(location)
    if path is None:
        return f"`{location}`"
    line = location.rsplit(":", 1)[1]
    return f"[{location}]({os.path.relpath(path, root)}#L{line})"


def render_explanation(c: SurvivingClone, root: Path) -> list[str]:
    """The index.md block for one explained clone."""
    e = c.explanation
    lines = [
        "",
        f"### why `{c.arg}` ({c.pool or 'unnamed input'}) is cloned: {e.cause}",
        "",
        f"- why: {e.reason}",
        f"- mutating call: {_source_link(e.user_line, root)}"
        + (f" (through {_source_link(e.wrapper_line, root)})" if e.wrapper_line else ""),
    ]
    lines += [f"- conflicting read: `{x.node}` ({x.op}) at {_source_link(x.user_line, root)}" for x in e.conflicting]
    if e.culprit_pass:
        proof = "verified: disabling it removes the clone" if e.culprit_verified else "not verified"
        lines.append(f"- culprit pass: `{e.culprit_pass}` ({proof})")
    lines += [f"- fix: {e.fix}", ""]
    before, after = e.graph_files.get("before_reinplace"), e.graph_files.get("post_grad")
    if before and after:
        readers = [x.node for x in e.conflicting]
        left = excerpt(Path(before).read_text(), [e.write_node or "", *readers])
        right = excerpt(Path(after).read_text(), [c.node, *readers])
        lines += [
            f"Before reinplacing ({_rel(before, root)}) and after all post-grad passes ({_rel(after, root)}); "
            "`>` marks the write, the clone and the conflicting reads:",
            "",
            *side_by_side(left, right, ("before reinplacing", "after post-grad passes")),
            "",
        ]
    return lines
