"""Compiled regions: undeclared writes of opaque ops, and whether vLLM's KV-update op survives codegen.

Apart because it is the backend's per-region hook (:class:`RegionWriteWatch`): it reads each final
post-grad graph (is each no-mutation opaque op anchored by an op Inductor must keep? is it in the
generated code?) and watches each compiled graph's runs with a :class:`WriteWatcher`. A graph that
calls no opaque op runs unwatched; one that does pays, around each opaque call, two per-row checksums
(one read each) of the pools that call can reach (:mod:`.reach`): those sharing storage with its
arguments, or every pool for an op reaching global state and on each op's first call of the session.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from compile_checks.check.writes.finding import WriteFinding
from compile_checks.check.writes.ops import VLLM_ATTENTION_OPS, VLLM_KV_UPDATE_OPS, declares_write, is_opaque, op_name
from compile_checks.check.writes.reach import WriteReach
from compile_checks.check.writes.rows import fmt_rows, row_bytes
from compile_checks.check.writes.watcher import WriteWatcher
from compile_checks.vocab import WriteProblem


@dataclass
class OpaqueNode:
    """An opaque op in a final post-grad graph that declares no mutation."""

    op: str
    node: str
    anchored: bool  # its output feeds something Inductor must keep
    in_generated_code: bool | None = None  # None: analysis-only (no generated code)


def _keeps(user: torch.fx.Node, seen: set[torch.fx.Node]) -> bool:
    """Whether ``user`` keeps its inputs alive through Inductor's codegen."""
    if user.op == "output":
        return True
    if user.op != "call_function":
        return False
    target = user.target
    if target is operator.getitem:
        return _anchored(user, seen)
    if is_opaque(target):
        if declares_write(target):
            return True  # a fallback kernel with side effects: never dropped, reads every input
        return _anchored(user, seen)
    return False


def _anchored(node: torch.fx.Node, seen: set[torch.fx.Node]) -> bool:
    """An op's result reaches the graph output or a side-effecting opaque op through opaque ops.

    ATen consumers do not count: Inductor lowers them and may never read a size-0 dummy
    (``q + dummy.sum()`` drops the op from the generated code though the FX graph keeps it).
    """
    if node in seen:
        return False
    seen.add(node)
    return any(_keeps(u, seen) for u in node.users)


def _pure_opaque(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and is_opaque(node.target) and not declares_write(node.target)


def opaque_nodes(gm: torch.fx.GraphModule, source_code: str | None) -> list[OpaqueNode]:
    """Every no-mutation opaque op of the final graph, anchored or not, and in the generated code?"""
    out = []
    for node in gm.graph.nodes:
        if not _pure_opaque(node):
            continue
        ns, _, name = op_name(node.target).partition(".")[0].partition("::")
        emitted = None if source_code is None else f"{ns}.{name}." in source_code
        out.append(OpaqueNode(op_name(node.target), node.name, _anchored(node, set()), emitted))
    return out


@dataclass
class RegionWrites:
    """What one compiled inner graph's runs wrote undeclared."""

    region: int
    nodes: list[OpaqueNode]
    writes: dict[tuple[str, str], set[int]] = field(default_factory=dict)  # (op, pool) -> rows


class RegionWriteWatch:
    """The probe's hook: records each compiled graph's opaque ops and watches its runs.

    :meth:`on_compiled` is called by the backend once per inner compile with the OutputCode
    and the final post-grad graph; it wraps ``current_callable`` so every run goes through a
    :class:`WriteWatcher`. ``received``: the probe's set of pools a region reached (a pool a
    side-effect op wrote is reached, though no graph input holds it). ``reach``: which pools are
    watched around each opaque call (:class:`~.reach.WriteReach`, one per session: what it learns
    about an op in one region holds in the next).
    """

    def __init__(
        self, pools: Mapping[str, torch.Tensor] | None, received: set[str], reach: WriteReach | None = None
    ) -> None:
        self.pools = dict(pools or {})
        self.received = received
        self.reach = reach if reach is not None else WriteReach()
        self.graphs: list[RegionWrites] = []
        # pool -> opaque calls around which it was checksummed (the watch's cost, for reports and benchmarks)
        self.watched: dict[str, int] = {}

    def on_compiled(self, out: Any, gm: torch.fx.GraphModule, region: int) -> None:
        source = getattr(out, "source_code", None)
        rw = RegionWrites(region, opaque_nodes(gm, source if isinstance(source, str) else None))
        self.graphs.append(rw)
        current = getattr(out, "current_callable", None)
        # only opaque ops can write undeclared (ATen schemas are trusted), and the generated code
        # calls no opaque op its post-grad graph did not hold: a graph without one runs unwatched
        has_opaque = any(n.op == "call_function" and is_opaque(n.target) for n in gm.graph.nodes)
        if current is None or not self.pools or not has_opaque:
            return
        received = self.received

        @functools.wraps(current)
        def call(args: list[Any]) -> Any:
            watcher = WriteWatcher(self.pools, reach=self.reach)  # the pools now (a rebuilt cache is followed)
            try:
                with watcher:
                    return current(args)
            finally:
                for w in watcher.writes:
                    rw.writes.setdefault((w.op, w.pool), set()).update(w.rows)
                    received.add(w.pool)
                for n, calls in watcher.watched.items():
                    self.watched[n] = self.watched.get(n, 0) + calls

        out.current_callable = call

    def findings(self) -> list[WriteFinding]:
        """Undeclared writes (failing), vLLM's attributed side-effect writes, dropped KV-update ops."""
        found: list[WriteFinding] = []
        for rw in self.graphs:
            by_op = {n.op: n for n in rw.nodes}
            for (op, pool), rows in sorted(rw.writes.items()):
                found.append(_write_finding(op, pool, tuple(sorted(rows)), rw.region, by_op.get(op), self.pools[pool]))
            for n in rw.nodes:
                if n.op not in VLLM_KV_UPDATE_OPS:
                    continue
                where = f"region {rw.region} node {n.node}"
                if n.in_generated_code is False:
                    found.append(
                        WriteFinding(
                            WriteProblem.DROPPED_WRITE_OP,
                            "",
                            n.op,
                            region=rw.region,
                            message=f"{n.op} ({where}) is in the final post-grad graph but not in Inductor's generated "
                            "code: the compiled region never writes its KV cache",
                        )
                    )
                elif not n.anchored:
                    found.append(
                        WriteFinding(
                            WriteProblem.UNANCHORED_WRITE_OP,
                            "",
                            n.op,
                            region=rw.region,
                            message=f"{n.op} ({where}): its dummy output feeds no op Inductor must keep "
                            "(vLLM passes it to unified_attention_with_output as kv_cache_dummy_dep); "
                            "Inductor's codegen may drop the KV write",
                        )
                    )
        return found


def _write_finding(
    op: str, pool: str, rows: tuple[int, ...], region: int, node: OpaqueNode | None, tensor: torch.Tensor
) -> WriteFinding:
    nbytes = len(rows) * row_bytes(tensor)
    anchored = node.anchored if node is not None else None
    emitted = node.in_generated_code if node is not None else None
    details = {"anchored": anchored, "in_generated_code": emitted, "node": node.node if node else None}
    if op in VLLM_ATTENTION_OPS or (op in VLLM_KV_UPDATE_OPS and anchored):
        why = (
            "recognised: a backend whose forward includes the KV update; the op declares its output mutated, "
            "so Inductor keeps it"
            if op in VLLM_ATTENTION_OPS
            else "recognised side-effect write: its dummy output orders it before attention"
        )
        return WriteFinding(
            WriteProblem.SIDE_EFFECT_WRITE,
            pool,
            op,
            rows=rows,
            nbytes=nbytes,
            region=region,
            fails=False,
            details={**details, "anchored": True},
            message=f"{op} wrote pool {pool!r} rows {fmt_rows(rows)}, {nbytes} bytes, through vLLM's forward "
            f"context ({why})",
        )
    risk = "Inductor may drop, reorder or CSE around it"
    if anchored is False:
        risk = "its output feeds nothing Inductor must keep: Inductor's codegen may drop it"
    return WriteFinding(
        WriteProblem.UNDECLARED_WRITE,
        pool,
        op,
        rows=rows,
        nbytes=nbytes,
        region=region,
        details=details,
        message=f"{op} wrote pool {pool!r} (rows {fmt_rows(rows)}, {nbytes} bytes) in region {region} though its "
        f"schema declares no mutation of it: {risk}; declare the write (Tensor(a!) / mutates_args)",
    )


__all__ = ["OpaqueNode", "RegionWriteWatch", "RegionWrites", "opaque_nodes"]
