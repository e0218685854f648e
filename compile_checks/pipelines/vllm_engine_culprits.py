"""The custom post-grad pass behind each finding of the engine gate, with its class and the node it touched.

From the edits :class:`~compile_checks.pipelines.vllm_engine_passes.PassWatch` recorded (nodes a pass
removed, added or rewired, each with the layer it names):

* a **lost write** of a pool: a pass that removed (else rewired) a node naming one of the pool's layers;
* a **copy** the check reports: a pass that added the copy's node (the clone itself), or added a node that
  reads the pool after its write (the reader a read-after-write refusal names), or rewired the write;
* a **buffer the generated code fills from a pool**: a pass that added a node Inductor computed it from.

Each is named on the finding itself (the copy's explanation, the write finding's message) and listed as a
:class:`Culprit`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from compile_checks.check.findings import CloneReport, SurvivingClone
from compile_checks.pipelines.vllm_engine_buffers import GeneratedBuffers
from compile_checks.pipelines.vllm_engine_passes import PassEdit
from compile_checks.vocab import Cause

PASS_FIX = "fix or remove {pass_} ({slot}): the gate passes without it"


@dataclass(frozen=True)
class Culprit:
    """A finding and the pass that caused it."""

    finding: str
    pass_class: str
    slot: str
    action: str  # what the pass did to the node: removed / added / rewired
    node: str
    target: str
    buffer: str | None = None  # the generated code's buffer it concerns, if a buffer

    def line(self) -> str:
        return f"{self.pass_class} ({self.slot}) {self.action} node {self.node} ({self.target}): {self.finding}"


def _pick(edits: Iterable[PassEdit], wanted: Iterable[str], kinds: Sequence[str]) -> tuple[PassEdit, str] | None:
    names = list(wanted)
    for kind in kinds:
        for edit in edits:
            nodes = getattr(edit, kind)
            for name in names:
                if name in nodes:
                    return edit, name
    return None


def _culprit(finding: str, hit: tuple[PassEdit, str]) -> Culprit:
    edit, node = hit
    return Culprit(finding, edit.pass_class, edit.slot, edit.action(node), node, edit.touched[node].target)


def name_culprits(
    report: CloneReport,
    edits: Sequence[PassEdit],
    layers_of: Mapping[str, tuple[str, ...]],
    generated: Sequence[GeneratedBuffers],
) -> list[Culprit]:
    """Every finding a recorded pass caused, named on the finding (``report`` is updated) and returned."""
    if not edits:
        return []
    out: list[Culprit] = []
    findings = []
    for f in report.run_findings:
        hit = _run_culprit(edits, f.region, layers_of.get(f.pool, (f.pool,))) if f.fails else None
        if hit is not None:
            c = _culprit(f"{f.kind} of {f.pool}", hit)
            out.append(c)
            f = dataclasses.replace(
                f,
                message=f"{f.message}; caused by {c.pass_class} ({c.slot}), which {c.action} node {c.node} "
                f"({c.target})",
                details={**f.details, "culprit": c.pass_class, "culprit_node": c.node},
            )
        findings.append(f)
    report.run_findings = findings
    report.errors = [_error(e, edits, layers_of) for e in report.errors]
    report.clones = [_clone(c, edits, out) for c in report.clones]
    report.other_clones = [_clone(c, edits, out) for c in report.other_clones]
    for g in generated:
        mine = [e for e in edits if e.region == g.region]
        for b in g.buffers:
            hit = _pick(mine, b.origins, ("added", "rewired"))
            if hit is not None:
                out.append(dataclasses.replace(_culprit(f"generated-code buffer {b.describe()}", hit), buffer=b.name))
    return out


def _run_culprit(edits: Sequence[PassEdit], region: int | None, layers: Iterable[str]) -> tuple[PassEdit, str] | None:
    """The pass behind a write finding of a region: one that removed, else rewired, else added a node naming one of
    the pool's layers; else the one pass that changed the region's graph, if only one did (the write check compares
    the compiled call with the captured graph, which no post-grad pass touched)."""
    mine = [e for e in edits if region is None or e.region == region]
    wanted = set(layers)
    for kind in ("removed", "rewired", "added"):
        nodes = [n for e in mine for n, info in getattr(e, kind).items() if info.layer in wanted]
        hit = _pick(mine, nodes, (kind,))
        if hit is not None:
            return hit
    if len({e.pass_class for e in mine}) == 1:  # one pass changed the region: it is the only difference
        for node in mine[0].touched:
            return mine[0], node
    return None


# the write check's hint when its eager run cannot be undone: true of an op, not of a graph a pass changed
_RESTORE = re.compile(r"region (\d+) .*could not restore pool '([^']+)'")
_OPAQUE_HINT = "an op wrote it where the check cannot see"


def _error(error: str, edits: Sequence[PassEdit], layers_of: Mapping[str, tuple[str, ...]]) -> str:
    m = _RESTORE.search(error)
    if m is None:
        return error
    hit = _run_culprit(edits, int(m.group(1)), layers_of.get(m.group(2), (m.group(2),)))
    if hit is None:
        return error
    c = _culprit("", hit)
    head = error.split(f": {_OPAQUE_HINT}", 1)[0]
    return (
        f"{head}: the compiled graph differs from the captured one the write check runs eagerly, "
        f"{c.pass_class} ({c.slot}) {c.action} node {c.node} ({c.target})"
    )


def _clone(c: SurvivingClone, edits: Sequence[PassEdit], out: list[Culprit]) -> SurvivingClone:
    mine = [e for e in edits if e.region == c.region]
    e = c.explanation
    readers = [x.node for x in e.conflicting] if e is not None else []
    what = f"copy {c.node} of {c.pool or c.arg} ({c.nbytes} B)"
    copy_hit = _pick(mine, [c.node], ("added",))
    read_hit = None if copy_hit else _pick(mine, readers, ("added", "rewired"))
    write_hit = (
        None if copy_hit or read_hit else _pick(mine, [e.write_node] if e and e.write_node else [], ("rewired",))
    )
    hit = copy_hit or read_hit or write_hit
    if hit is None or e is None:
        return c
    culprit = _culprit(what, hit)
    out.append(culprit)
    who = f"{culprit.pass_class} ({culprit.slot})"
    if copy_hit:
        reason = f"the copy is node {c.node} ({culprit.target}), which {who} added: no reinplace decision made it"
        cause = Cause.OTHER
    elif read_hit:
        base = e.reason.replace("; the read follows the write in the program itself", "")
        reason = f"{base}; {who} {culprit.action} that read (node {culprit.node}, {culprit.target})"
        cause = e.cause
    else:
        reason = f"{e.reason}; {who} rewired the write (node {culprit.node}, {culprit.target})"
        cause = e.cause
    fix = PASS_FIX.format(pass_=culprit.pass_class, slot=culprit.slot)
    evidence = f"the pass {culprit.action} node {culprit.node} in this region's graph"
    explanation = dataclasses.replace(
        e, cause=cause, reason=reason, culprit_pass=culprit.pass_class, culprit_evidence=evidence, fix=fix
    )
    return dataclasses.replace(c, explanation=explanation)


__all__ = ["Culprit", "name_culprits"]
