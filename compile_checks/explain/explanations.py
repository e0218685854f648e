"""Explain each surviving clone: the cause, the user's source line, the pass that caused it, the fix.

A check records (:class:`~compile_checks.explain.culprit_pass.PostGradRecorder`) why Inductor's reinplace
pass cloned each mutated argument, and which post-grad pass moved a read below the write;
:func:`explain_report` attaches an :class:`Explanation` to every clone of the report.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from compile_checks.check.findings import CloneReport, SurvivingClone
from compile_checks.explain.culprit_pass import GraphRecord, PostGradRecorder
from compile_checks.explain.refusals.records import Refusal
from compile_checks.vocab import CAUSES, Cause, CopyKind, WriteKind

REORDER_FIX = (
    "keep the commit out of reach of `{pass_}`: `torch.compile(fn, options={{'{pass_}': False}})`, or in vLLM "
    "`CompilationConfig(inductor_compile_config={{'{pass_}': False}})`; or commit before the window gather "
    "(the write-then-read order is clean by construction)"
)
POOL_REPLACED_FIX = (
    "update the pool in place (`self.keys.index_copy_(2, pos, k)`, `cache[:, a:b].copy_(x)`) instead of rebinding "
    "it to an out-of-place result (`self.keys = self.keys.index_copy(2, pos, k)`)"
)
CUSTOM_PASS_FIX = (
    "`{pass_}` moved the read below the write: fix that pass, or switch it off with "
    "`torch._inductor.config.disabled_passes = '{pass_}'`; or commit before the window gather "
    "(the write-then-read order is clean by construction)"
)
FIXES: dict[str, str] = {
    Cause.SHARED_STORAGE: (
        "allocate K and V as separate tensors (for example `ar_paging.allocate_kv_pool_with_views`); "
        "or pass the one `(2, ...)` allocation whole and take `kv[0]` / `kv[1]` inside the compiled region "
        "(vLLM: hand the attention layer its `kv_cache` tensor whole, not pre-split views of it); "
        "the whole-tensor form needs auto_functionalized_v2 "
        "(under v1 Inductor clones views of an input: see `view_of_input_v1`)"
    ),
    Cause.READ_AFTER_WRITE: (
        "commit before the window gather (the write-then-read order is clean by construction), or read the "
        "new values from what the write produced instead of the pool"
    ),
    Cause.VIEW_NOT_WRITTEN_BACK: (
        "pass the pool to the compiled region as a whole tensor it writes, not a view derived inside it"
    ),
    Cause.VIEW_OF_INPUT_V1: (
        "pass K and V to the compiled region as separate tensors (for example "
        "`ar_paging.allocate_kv_pool_with_views`), or functionalize with auto_functionalized_v2: torch "
        "`torch._inductor.config.enable_auto_functionalized_v2 = True` "
        "(the default); vLLM 0.33 sets it False for every compile, override with "
        "`CompilationConfig(inductor_compile_config={'enable_auto_functionalized_v2': True})` (vLLM's own fusion "
        "passes expect v1)"
    ),
    Cause.OUTPUT_ALIAS: (
        "do not return the pool (or a view of it) from the compiled region; return what you computed from it"
    ),
    Cause.CHAINED_WRITES: (
        "write each pool once per compiled region: both halves of a `(2, ...)` cache in one assignment "
        "(`cache[:, :, :, :n] = torch.stack([k, v])`), or K and V as separate tensors; and skip a write of "
        "no elements in Python (`if n: cache[...] = ...`, n a Python int): a `[:0]` write still costs the copy"
    ),
    Cause.OTHER: "see Inductor's reason above; keep the dump (`dump_dir=`) and report it with the graphs",
}
# where plain ATen writes need other advice than an opaque op: a view taken inside the region is what they copy
# (the whole-tensor form FIXES advises for an op is the layout that copies), views passed in are written in place
ATEN_FIXES: dict[str, str] = {
    Cause.SHARED_STORAGE: (
        "allocate K and V as separate tensors (for example `ar_paging.allocate_kv_pool_with_views`); "
        "or split the `(2, ...)` allocation outside the compiled region and pass `kv[0]` / `kv[1]` as two "
        "inputs (plain ATen writes into views passed in are written in place); do not pass it whole to take "
        "`kv[0]` / `kv[1]` inside: ATen writes through views taken inside the region copy it "
        "(`view_not_written_back`)"
    ),
    Cause.VIEW_NOT_WRITTEN_BACK: (
        "pass the compiled region the tensors it writes: split a `(2, ...)` cache outside it and pass `kv[0]` / "
        "`kv[1]` as two inputs, or allocate K and V apart; plain ATen writes through a view taken inside the "
        "region are copied whole"
    ),
}


@dataclass(frozen=True)
class Conflict:
    """A node that reads the buffer after the write (or returns it), with its user source line."""

    node: str
    op: str
    user_line: str | None = None
    wrapper_line: str | None = None  # the library function the read went through, if any

    def describe(self) -> str:
        if self.op == "output":
            return "the graph's output (it returns the buffer)"
        where = f" at {self.user_line}" if self.user_line else ""
        where += f" (through {self.wrapper_line})" if self.wrapper_line else ""
        return f"`{self.node}` ({self.op}){where}"


@dataclass(frozen=True)
class Explanation:
    """Why one clone survived, where the user wrote it, which pass caused it, how to fix it."""

    cause: Cause
    reason: str
    user_line: str | None = None  # "file.py:123" of the mutating call (the model's line)
    wrapper_line: str | None = None  # the library wrapper the call went through (innermost frame)
    conflicting: list[Conflict] = field(default_factory=list)
    culprit_pass: str | None = None
    culprit_verified: bool = False
    # how the culprit is known when no re-run tested it (the engine gate: the pass's own edit of the graph)
    culprit_evidence: str | None = None
    fix: str = ""
    # where the evidence sits in the dump (filled by compile_checks.explain.dumps when dumps are written)
    graph_files: dict[str, str] = field(default_factory=dict)
    write_node: str | None = None

    def __post_init__(self) -> None:
        if self.cause not in CAUSES:
            raise ValueError(f"cause must be one of {CAUSES}, got {self.cause!r}")

    def summary(self) -> str:
        """One line: cause, reason, source line, culprit, fix."""
        parts = [f"{self.cause}: {self.reason}"]
        if self.user_line:
            through = f" (through {self.wrapper_line})" if self.wrapper_line else ""
            parts.append(f"written at {self.user_line}{through}")
        if self.culprit_pass:
            proof = "verified" if self.culprit_verified else self.culprit_evidence or "not verified"
            parts.append(f"caused by {self.culprit_pass} ({proof})")
        parts.append(f"fix: {self.fix}")
        return "; ".join(parts)

    def lines(self) -> list[str]:
        out = [f"why: {self.cause}: {self.reason}"]
        through = f" (through {self.wrapper_line})" if self.wrapper_line else ""
        out.append(f"mutating call: {self.user_line or '(no user stack trace on the node)'}{through}")
        out += [f"conflicting read: {c.describe()}" for c in self.conflicting]
        if self.culprit_pass:
            proof = (
                f"verified: re-running the post-grad passes with {self.culprit_pass} off removes this clone"
                if self.culprit_verified
                else self.culprit_evidence or "not verified: the clone stays with the pass disabled"
            )
            out.append(f"culprit pass: {self.culprit_pass} ({proof})")
        out.append(f"fix: {self.fix}")
        return out

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["conflicting"] = [dataclasses.asdict(c) for c in self.conflicting]
        if d["culprit_evidence"] is None:  # only the engine gate's culprits carry it
            del d["culprit_evidence"]
        return d


_KV_WORDS = frozenset({"k", "v", "key", "value", "keys", "values", "kv"})


def looks_like_kv(*names: str | None) -> bool:
    """Every name reads as a K or V cache (``layer0.k``, ``v_pool``, ``keys``); an unknown name does too."""
    return all(name is None or _KV_WORDS & set(re.split(r"[^a-z0-9]+", name.lower())) for name in names)


def shared_storage_fix(me: str, other: str) -> str:
    """The ``shared_storage`` fix worded by the two buffers' own names (a latent and a rope cache, not K and V)."""
    return (
        f"allocate {me} and {other} as separate tensors; or pass their one allocation whole and take both views "
        "inside the compiled region (vLLM: hand the attention layer its cache tensor whole, not pre-split views "
        "of it); the whole-tensor form needs auto_functionalized_v2 (under v1 Inductor clones views of an input: "
        "see `view_of_input_v1`)"
    )


def fix_for(cause: str, culprit: str | None, write_kind: str = WriteKind.OPAQUE_OP) -> str:
    """The fix of ``cause``: the pass to switch off for a moved read; for a layout, by how the pool is written
    (``write_kind``: an opaque op, or plain ATen writes, which copy the whole-tensor form an op is fine with)."""
    if cause == Cause.READ_AFTER_WRITE and culprit is not None:
        template = REORDER_FIX if culprit in _INDUCTOR_REORDER_PASSES else CUSTOM_PASS_FIX
        return template.format(pass_=culprit)
    if write_kind == WriteKind.ATEN and cause in ATEN_FIXES:
        return ATEN_FIXES[cause]
    return FIXES[cause]


# the culprit of a read moved below the write by a post-grad pass the record cannot name (a record rebuilt from a
# trace, compile_checks.scan.replay): said in the reason, never given as a pass to switch off
UNNAMED_PASS = "<a post-grad pass>"

# built-in Inductor passes that take an Inductor config flag of the same name
_INDUCTOR_REORDER_PASSES = ("reorder_for_locality",)


def _pool_of(
    record: GraphRecord,
    placeholder: str | None,
    probe: Any,
    pools: Mapping[str, torch.Tensor] | None,
    anchor: tuple[str | None, str | None] = (None, None),
) -> str | None:
    """The caller's pool name of graph input ``placeholder`` (runtime storage + geometry), taken from
    the call in which graph input ``anchor[0]`` held pool ``anchor[1]`` (a region runs once per layer)."""
    if probe is None or not pools or placeholder not in record.placeholders:
        return None
    from compile_checks.check.attribution import match_pool

    def pool_at(sig: tuple[Any, ...], name: str | None) -> str | None:
        ref = sig[record.placeholders[name]] if name in record.placeholders else None
        return match_pool(ref, ref, pools) if ref is not None else None

    region = next((r for r in probe.regions if r.index == record.region), None)
    for inner in region.inner if region is not None else []:
        for sig in inner.recorder.signatures if inner.recorder is not None else []:
            if len(sig) != len(record.placeholders):
                continue
            if anchor[1] is None or pool_at(sig, anchor[0]) == anchor[1]:
                return pool_at(sig, placeholder)
    return None


def explanation_of(
    refusal: Refusal,
    record: GraphRecord,
    index: int,
    clone: SurvivingClone,
    probe: Any = None,
    pools: Mapping[str, torch.Tensor] | None = None,
) -> Explanation:
    """Turn one recorded refusal into the user-facing :class:`Explanation` of ``clone``."""
    arg = clone.arg if clone.arg in refusal.args else "/".join(refusal.args)
    where = f"graph input {refusal.placeholder}" if refusal.placeholder else f"graph node {refusal.base}"
    me = f"`{arg}`" + (f" ({clone.pool})" if clone.pool else f" ({where})")
    culprit = record.culprits.get(index)
    verified = record.verified.get(index, False)
    moved_by_unnamed_pass = culprit == UNNAMED_PASS
    if moved_by_unnamed_pass:  # a record rebuilt from a trace: a pass moved the read, the trace does not say which
        culprit = None
    conflicts = [Conflict(r.node, r.op, r.user_line, r.wrapper_line) for r in refusal.readers]
    fix = fix_for(refusal.cause, culprit, refusal.write_kind)
    if refusal.cause == Cause.SHARED_STORAGE:
        other_pool = _pool_of(record, refusal.other_base, probe, pools, (refusal.placeholder, clone.pool))
        other = "/".join(refusal.other_args) or refusal.other_base or "another argument"
        other_desc = f"`{other}`" + (f" ({other_pool})" if other_pool else f" (graph input {refusal.other_base})")
        reason = (
            f"{me} shares one storage with {other_desc}; Inductor writes {other_desc} in place and must clone "
            f"the shared storage for {me} ({clone.nbytes} bytes)"
        )
        # a latent and a rope cache written by an opaque op: the fix by their own names (ATen writes: ATEN_FIXES)
        if refusal.write_kind == WriteKind.OPAQUE_OP and not looks_like_kv(clone.pool or arg, other_pool or other):
            fix = shared_storage_fix(me, other_desc)
    elif refusal.cause == Cause.READ_AFTER_WRITE:
        first = conflicts[0].describe() if conflicts else "a later node"
        reason = (
            f"the old value of {me} is read after the write by {first} in the final order, so Inductor keeps a copy"
        )
        if culprit:
            reason += (
                f"; `{culprit}` moved that read below the write (it came before it in the graph the pass received)"
            )
        elif moved_by_unnamed_pass:
            reason += (
                "; a post-grad pass moved that read below the write (it came before it in AOT's graph; which pass, "
                "the trace does not say: the gate names and verifies it)"
            )
        else:
            reason += "; the read follows the write in the program itself"
    elif refusal.cause == Cause.OUTPUT_ALIAS:
        reason = f"{me} is aliased by a graph output, so the caller would see the write: Inductor keeps a copy"
    elif refusal.cause == Cause.VIEW_NOT_WRITTEN_BACK:
        reason = f"{me}: {refusal.detail}"
    else:
        reason = f"{me}: {refusal.detail}"
    return Explanation(
        cause=refusal.cause,
        reason=reason,
        user_line=refusal.user_line,
        wrapper_line=refusal.wrapper_line,
        conflicting=conflicts,
        culprit_pass=culprit,
        culprit_verified=verified,
        fix=fix,
        write_node=refusal.node,
    )


def _find(records: list[GraphRecord], clone: SurvivingClone) -> tuple[GraphRecord, int] | None:
    """The refusal behind ``clone``: by its clone node, else by the write node, else by (op, arg)."""
    for rec in records:
        if clone.node in rec.clone_nodes:
            return rec, rec.clone_nodes[clone.node]
    for rec in records:
        for i, r in enumerate(rec.refusals):
            if r.node == clone.node:
                return rec, i
    for rec in records:
        for i, r in enumerate(rec.refusals):
            if r.op == clone.op and clone.arg in r.args:
                return rec, i
    return None


def explain_clone(
    clone: SurvivingClone,
    records: list[GraphRecord],
    probe: Any = None,
    pools: Mapping[str, torch.Tensor] | None = None,
) -> Explanation:
    if clone.kind == CopyKind.POOL_REPLACED:
        return Explanation(
            cause=Cause.OTHER,
            reason=(
                f"pool {clone.pool} is another tensor after each call of region {clone.region}: the region returns "
                f"an out-of-place update of it ({clone.op}, {clone.arg}) and the program rebinds the pool to it, "
                f"so the whole pool ({clone.nbytes} bytes) is copied into a new buffer every call"
            ),
            fix=POOL_REPLACED_FIX,
        )
    found = _find([r for r in records if r.region == clone.region], clone)
    if found is None:
        logs = "; ".join(line for r in records if r.region == clone.region for line in r.inductor_log.values())
        return Explanation(
            cause=Cause.OTHER,
            reason=f"no reinplace decision was recorded for `{clone.arg}` in region {clone.region}"
            + (f"; Inductor: {logs}" if logs else "; Inductor logged no reinplace decision for it"),
            fix=FIXES[Cause.OTHER],
        )
    record, index = found
    return explanation_of(record.refusals[index], record, index, clone, probe, pools)


def explain_report(report: CloneReport, probe: Any, check: Any) -> CloneReport:
    """Fill ``explanation`` on every clone and other clone of ``report`` from the check's recorder."""
    recorder: PostGradRecorder | None = getattr(check, "explain_recorder", None)
    if recorder is None:
        return report
    pools = getattr(check, "pools", None)

    def explain(c: SurvivingClone) -> SurvivingClone:
        return dataclasses.replace(c, explanation=explain_clone(c, recorder.records, probe, pools))

    report.clones = [explain(c) for c in report.clones]
    report.other_clones = [explain(c) for c in report.other_clones]
    dump_dir = getattr(check, "dump_dir", None)
    if dump_dir is not None and (report.clones or report.other_clones):
        from compile_checks.explain.dumps import write_explained_graphs

        report.clones, report.other_clones = write_explained_graphs(report, recorder.records, dump_dir, probe)
    return report


__all__ = [
    "ATEN_FIXES",
    "FIXES",
    "UNNAMED_PASS",
    "Conflict",
    "Explanation",
    "explain_clone",
    "explain_report",
    "explanation_of",
    "fix_for",
]
