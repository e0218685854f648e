"""depyf dumps of a check, and an index.md that points at the graphs and the clone lines.

depyf 0.20 (``depyf.prepare_debug(dir)``) writes, per compiled region ``__compiled_fn_N``:

* ``__compiled_fn_N.BEFORE_PRE_GRAD.0.py``: the dynamo-captured graph;
* ``__compiled_fn_N.Forward_graph.0.py``: the AOT functionalized graph (``auto_functionalized*``);
* ``__compiled_fn_N.AFTER_POST_GRAD.0.py``: the final post-grad graph (after reinplacing and
  ``decompose_auto_functionalized``): a surviving clone is an ``aten.clone`` line here;
* ``__compiled_fn_N.kernel_0.py``: Inductor's generated code;
* plus ``__transformed_code_*_for_<fn>.py`` / ``full_code_for_<fn>_0.py`` (dynamo bytecode, decompiled).

Detection never reads these files; they only give each clone a ``file:line``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from compile_checks.backend import Probe, Region
from compile_checks.findings import CloneReport, SurvivingClone
from compile_checks.graph_analysis import node_line

FILE_KINDS: dict[str, str] = {
    "captured": "BEFORE_PRE_GRAD",
    "functionalized": "Forward_graph",
    "post_grad": "AFTER_POST_GRAD",
    "kernel": "kernel",
}


def _files(dump_dir: Path, fn_name: str, kind: str) -> list[Path]:
    sep = "_" if kind == "kernel" else "."
    return sorted(dump_dir.glob(f"{fn_name}.{kind}{sep}*.py"))


def region_files(dump_dir: Path, region: Region) -> dict[str, str | None]:
    """The dump files of one region (first of each kind; None if depyf wrote none)."""
    out: dict[str, str | None] = {}
    for key, kind in FILE_KINDS.items():
        found = _files(dump_dir, region.compiled_fn_name, kind)
        out[key] = str(found[0]) if found else None
    return out


def _locate(dump_dir: Path, region: Region, node: str) -> tuple[str | None, int | None]:
    for path in _files(dump_dir, region.compiled_fn_name, FILE_KINDS["post_grad"]):
        line = node_line(path.read_text(), node)
        if line is not None:
            return str(path), line
    return None, None


def annotate_report(report: CloneReport, probe: Probe, dump_dir: str) -> CloneReport:
    """Fill ``graph_file``/``line`` of each clone and ``report.region_files`` from the dump."""
    root = Path(dump_dir)
    by_index = {r.index: r for r in probe.regions}

    def locate(c: SurvivingClone) -> SurvivingClone:
        region = by_index.get(c.region)
        if region is None:
            return c
        path, line = _locate(root, region, c.node)
        return dataclasses.replace(c, graph_file=path, line=line)

    report.clones = [locate(c) for c in report.clones]
    report.other_clones = [locate(c) for c in report.other_clones]
    report.region_files = {r.index: region_files(root, r) for r in probe.regions}
    return report


def _rel(path: str | None, root: Path) -> str:
    if path is None:
        return "(not written)"
    try:
        return f"`{Path(path).relative_to(root)}`"
    except ValueError:
        return f"`{path}`"


def render_index(report: CloneReport, probe: Probe, dump_dir: str) -> str:
    """Markdown index: per region its files, its mutated arguments, its surviving clones."""
    root = Path(dump_dir)
    verdict = "CLEAN: every mutated pool argument was re-inplaced" if report.clean else (
        f"{len(report.clones)} surviving pool clone(s), {report.clone_bytes} bytes per execution"
    )
    lines = [
        "# compile_checks dump index",
        "",
        f"Verdict: **{verdict}**.",
        "",
        "Files per region (depyf 0.20 names): captured = dynamo graph, functionalized = AOT graph with "
        "`auto_functionalized*`, post_grad = final graph after reinplace + decomposition (clones show up "
        "here), kernel = Inductor output code.",
        "",
    ]
    for region in probe.regions:
        files = report.region_files.get(region.index) or region_files(root, region)
        lines += [
            f"## region {region.index}: `{region.compiled_fn_name}`",
            "",
            f"- calls: {report.region_calls.get(region.index, 0)}; kernel bytes (Inductor metrics): "
            f"{report.region_kernel_bytes.get(region.index, 0)}; compile: {region.compile_seconds:.2f} s",
        ]
        lines += [f"- {key}: {_rel(files.get(key), root)}" for key in FILE_KINDS]
        args = [m for m in report.mutated_args if m.region == region.index]
        if args:
            lines.append("- mutated arguments:")
            lines += [
                f"  - `{m.op}` `{m.arg}` (pool {m.pool or '-'}): {'re-inplaced' if m.reinplaced else 'CLONED'}"
                for m in args
            ]
        clones = [c for c in report.clones + report.other_clones if c.region == region.index]
        if clones:
            lines.append("- surviving clones:")
            for c in clones:
                where = f"{_rel(c.graph_file, root)}:{c.line}" if c.graph_file else "(line not found)"
                lines.append(
                    f"  - node `{c.node}` -> `{c.op}` `{c.arg}` (pool {c.pool or '-'}): {c.nbytes} bytes "
                    f"{list(c.shape)} {str(c.dtype).removeprefix('torch.')} at {where}"
                )
        else:
            lines.append("- surviving clones: none")
        lines.append("")
    if report.notes:
        lines += ["## notes", ""] + [f"- {n}" for n in report.notes] + [""]
    return "\n".join(lines)


def write_index(report: CloneReport, probe: Probe, dump_dir: str) -> Path:
    path = Path(dump_dir) / "index.md"
    path.write_text(render_index(report, probe, dump_dir))
    return path
