"""Whether a case met its expectation, why not, and how a surviving copy reads: decided here, once.

Plain functions over plain values (torch-free): the verdict itself is
:class:`compile_checks.findings.Verdict`, computed once from a case's findings; this module words it
(why a case failed, how a copy reads), so the in-process ``CaseResult``, the gate's cross-process
``Outcome``, the pytest plugin, the JUnit writer and the gate's table print the same words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compile_checks.findings import UNDECIDED_KINDS, Finding, Verdict, copy_label, finding_lines
from compile_checks.vocab import CopyKind, FindingKind

NEGATIVE_CONTROL_LOST = (
    "negative control stopped cloning: expected a surviving pool clone, found none "
    "(the check lost its power to see this bug)"
)


def _ordered(failing: Sequence[Finding]) -> list[Finding]:
    """What kept the check from a verdict first, then every other failing finding, in finder order."""
    return sorted(failing, key=lambda f: f.kind not in UNDECIDED_KINDS)


def failure_reasons(
    verdict: Verdict,
    *,
    copies: Sequence[Mapping[str, Any]],
    copies_listed: bool = False,
    pipeline: str | None = None,
    retargeted_from: str | None = None,
    observed: Mapping[str, bool] | None = None,
) -> list[str]:
    """Why a case did not pass, from its :class:`~compile_checks.findings.Verdict`; empty when it passed.

    Each failing finding on its own line (what kept the check from a verdict reads "the check could not
    decide: ..."; a lost write is a ``lost_write`` line), its cause and fix after it
    (:func:`compile_checks.findings.finding_lines`); then the copy verdict, then compiled != eager.

    ``copies``: :func:`copy_fields` of every surviving copy; ``copies_listed``: the caller prints
    them itself (one per line), so the reason only counts them. ``pipeline``: the one the case ran
    under (named when not stock); ``retargeted_from``: the case's own pipeline when the gate's
    ``pipelines`` re-ran its single ``expect_clean`` under another: then the pipeline is what changed,
    and the reason says so (with the per-pipeline ``expect_clean`` that would state it). ``observed``:
    pipeline -> clean of the same case in this run; the suggested ``expect_clean`` states only those.
    """
    failing = [f for f in verdict.failing if f.kind != FindingKind.MISMATCH]
    reasons = finding_lines(_ordered(failing))
    expect_clean, clean = verdict.expect_clean, verdict.clean
    changed = (pipeline, retargeted_from) if pipeline and retargeted_from and retargeted_from != pipeline else None
    if not clean and expect_clean:
        listed = " (each listed on its own line)" if copies_listed else ": " + "; ".join(map(render_copy, copies))
        reasons.append(f"{len(copies)} pool clone(s) survive reinplacing{_under(pipeline)}{listed}")
        if changed:
            reasons.append(_pipeline_changed(True, *changed, observed or {}))
    if clean and not expect_clean:
        if changed:
            reasons.append(
                f"negative control stopped cloning under the {pipeline} pipeline; "
                + _pipeline_changed(False, *changed, observed or {})
                + "; if not, the check lost its power to see this bug"
            )
        else:
            reasons.append(NEGATIVE_CONTROL_LOST + _under(pipeline))
    reasons += [f.message for f in verdict.of_kind(FindingKind.MISMATCH)]
    return reasons


def _under(pipeline: str | None) -> str:
    return "" if pipeline is None or pipeline == "stock" else f" under the {pipeline} pipeline"


def _pipeline_changed(expect_clean: bool, pipeline: str, own: str, observed: Mapping[str, bool]) -> str:
    """What changed may be the pipeline, not the check: the per-pipeline expectation that would say so,
    stating only the verdicts this run showed (``observed``: pipeline -> clean)."""
    chosen = f"the gate's pipelines chose {pipeline}: the case's expect_clean={expect_clean} was written for its own"
    seen = {p: observed[p] for p in (own, pipeline) if p in observed}
    seen.setdefault(pipeline, not expect_clean)  # this outcome is the verdict under ``pipeline``
    if own in seen and seen[own] == seen[pipeline]:
        verdict = "clean" if seen[own] else "cloning"
        return (
            f"{chosen} pipeline {own}, but this run shows it {verdict} under {own} too: the pipeline is not what "
            f"changed, so no per-pipeline expect_clean is suggested"
        )
    mapping = "expect_clean={" + ", ".join(f"'{p}': {v}" for p, v in seen.items()) + "}"
    unseen = "" if own in seen else f" (this run did not run it under {own}: state {own}'s as you know it)"
    return (
        f"{chosen} pipeline {own}, and this layout may {'clone' if expect_clean else 'be clean'} only under "
        f"{pipeline}; if so, state it per pipeline: {mapping}{unseen}"
    )


def copy_fields(c: Any) -> dict[str, Any]:
    """A surviving copy (``compile_checks.check.findings.SurvivingClone``) as plain data: the gate's JSON
    ``clones`` entries, what :func:`render_copy` reads (:meth:`SurvivingClone.fields`)."""
    fields: dict[str, Any] = c.fields()
    return fields


def _bytes_per_call_range(copies: Sequence[Mapping[str, Any]]) -> dict[int, tuple[int, int]]:
    """Region -> (smallest, largest) bytes one call of it moves.

    A call runs each copy node once: entries of one node are the pools (and sizes) it copied on
    different calls (a graph called once per layer, a symbolic graph serving pools of several sizes),
    never one call's sum. An entry without a node is a copy of its own."""
    by_node: dict[tuple[int, str], list[int]] = {}
    for i, c in enumerate(copies):
        region = int(c.get("region") or 0)
        by_node.setdefault((region, str(c.get("node") or f"#{i}")), []).append(int(c["nbytes"]))
    out: dict[int, tuple[int, int]] = {}
    for (region, _node), sizes in sorted(by_node.items()):
        lo, hi = out.get(region, (0, 0))
        out[region] = (lo + min(sizes), hi + max(sizes))
    return out


def bytes_by_region(copies: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """Bytes the copies move in the heaviest call of each region that has one (region -> bytes)."""
    return {region: hi for region, (_lo, hi) in _bytes_per_call_range(copies).items()}


def bytes_per_call(copies: Sequence[Mapping[str, Any]]) -> str:
    """Bytes per call, per region, as the calls ran: a call moves one region's copies, so regions are never
    summed, nor the pools one copy node hit on different calls.

    ``131072 B/call`` (one region), ``131072 B/call in each of 3 regions``, ``3072 to 4096 B/call``
    (calls at different sizes), else ``region 0: 65536, region 2: 131072 B/call``."""
    per_region = {
        r: (f"{lo} to {hi}" if lo != hi else str(hi)) for r, (lo, hi) in _bytes_per_call_range(copies).items()
    }
    values = set(per_region.values())
    if len(per_region) == 1:
        return f"{next(iter(values))} B/call"
    if len(values) == 1:
        return f"{next(iter(values))} B/call in each of {len(per_region)} regions"
    return ", ".join(f"region {r}: {b}" for r, b in per_region.items()) + " B/call"


def copy_names(copies: Sequence[Mapping[str, Any]], most: int = 3) -> str:
    """The copied pools by name (the caller's tensor where no pool is known), at most ``most`` of them."""
    names = sorted({copy_label(c) for c in copies})
    return ",".join(names) if len(names) <= most else ",".join(names[: most - 1]) + f",+{len(names) - most + 1} more"


_COPY_WHAT: dict[str, str] = {
    CopyKind.ATEN_WRITE_COPY: "whole-buffer copy by a functional ATen write",
    CopyKind.COLLECTIVE_COPY: "whole-buffer copy by an out-of-place collective",
    CopyKind.POOL_REPLACED: "whole-pool copy into a new tensor the pool is rebound to",
}


def render_copy(d: Mapping[str, Any]) -> str:
    """One line: op, argument, pool, bytes (and copied back), where, and why when explained."""
    pool = f"pool {d['pool']}" if d["pool"] is not None else f"no pool named: {copy_label(d)}"
    what = _COPY_WHAT.get(str(d.get("kind")), "clone")
    back = f", {d['written_bytes']} bytes copied back" if d.get("written_bytes") else ""
    shape = f" {d['shape']} {d['dtype']}" if "shape" in d else ""
    where = d["where"]
    if "node" in d and where != f"region {d['region']} node {d['node']}":  # a dump file: name the node too
        where = f"region {d['region']} node {d['node']}, {where}"
    rank = f"rank {d['rank']}: " if d.get("rank") is not None else ""  # a ranked case's copy (compile_checks.ranks)
    bound = " (undecided: no generated code said whether Inductor gives it a buffer)" if d.get("upper_bound") else ""
    text = (
        f"{rank}{d['op']} argument {d['arg']!r} ({pool}): {what} of {d['nbytes']} bytes{shape}{back}{bound} at {where}"
    )
    return text + (f" -- {d['explanation']}" if d.get("explanation") else "")


__all__ = [
    "NEGATIVE_CONTROL_LOST",
    "bytes_by_region",
    "bytes_per_call",
    "copy_fields",
    "copy_names",
    "failure_reasons",
    "render_copy",
]
