"""Extra bytes a compiled run moves beyond the ideal, node by node from the final graph.

Each surviving copy the check reports is a node of a compiled region's final
post-grad graph, and it runs every time that region runs. Per call it costs:

* ``clone``: the copy of the pool (or of its whole storage, for a fused layout):
  read + write of ``nbytes`` (``SurvivingClone.traffic_bytes``);
* ``copy_back``: after the op wrote into the copy, the mutated view is copied back
  into the pool: read + write of ``written_bytes`` (measured: the fused step's
  extra time is 1.04-1.21x one clone plus one copy-back, 1.26-1.49x the clone
  alone, so leaving it out under-counts);
* ``scatter_copy``: the same two copies for an ATen write (``index_put``,
  ``index_copy``, ``scatter``...) that stayed functional (``kind ==
  "aten_write_copy"``): the clone row is its copy-in, the copy-back row its copy-out.

The analysis lists a copy once per pool it hits (a clone node that serves layer 0
and layer 1 in turn appears twice), each entry with the calls that ran it: a call is
charged only the copy of the pool that call received, at that call's sizes (a graph called
once per layer copies one layer per call; a symbolic graph copies each call's own size).
Pure functions: testable on hand-built findings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from compile_checks.check.findings import CloneReport, SurvivingClone
from compile_checks.vocab import CopyKind


@dataclass(frozen=True)
class NodeCost:
    """One node's extra traffic: per call of its region, and over the run."""

    case: str
    region: int
    node: str
    cost: str  # "clone" | "copy_back" | "scatter_copy_in" | "scatter_copy_out"
    kind: str  # SurvivingClone.kind
    op: str
    arg: str
    pool: str | None
    bytes_per_call: int  # traffic: read + write
    region_calls: int  # the calls of its region that ran this copy (of this pool, at these bytes)
    bytes_per_run: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def executed_clones(report: CloneReport) -> list[SurvivingClone]:
    """One entry per copy node: distinct ``(region, node)`` (entries without a node stay distinct)."""
    seen: set[tuple[int, str]] = set()
    out: list[SurvivingClone] = []
    for c in report.clones:
        if c.node:
            if (c.region, c.node) in seen:
                continue
            seen.add((c.region, c.node))
        out.append(c)
    return out


def charged_clones(report: CloneReport) -> list[SurvivingClone]:
    """The entries a run is charged for: each with its own calls (the pool that call received, at that
    call's sizes); an entry without ``calls`` (built by hand) is charged every call of its region, once
    per copy node."""
    counted = [c for c in report.clones if c.calls is not None]
    unknown = CloneReport(clones=[c for c in report.clones if c.calls is None])
    return counted + executed_clones(unknown)


def node_costs(case: str, report: CloneReport) -> list[NodeCost]:
    """Every extra copy of the run as rows: two per surviving copy (copy-in and copy-back,
    whose size is the check's ``SurvivingClone.written_bytes``: the mutated view it writes back)."""
    rows: list[NodeCost] = []
    for c in charged_clones(report):
        calls = int(c.calls if c.calls is not None else report.region_calls.get(c.region, 0))
        scatter = c.kind == CopyKind.ATEN_WRITE_COPY
        for cost, per_call in (
            ("scatter_copy_in" if scatter else "clone", c.traffic_bytes),
            ("scatter_copy_out" if scatter else "copy_back", 2 * c.written_bytes),
        ):
            if per_call == 0:
                continue  # no copy-back: the op's output is not written back to a pool
            rows.append(
                NodeCost(
                    case=case,
                    region=c.region,
                    node=c.node,
                    cost=cost,
                    kind=c.kind,
                    op=c.op,
                    arg=c.arg,
                    pool=c.pool,
                    bytes_per_call=per_call,
                    region_calls=calls,
                    bytes_per_run=per_call * calls,
                )
            )
    return rows


def bytes_per_run(rows: list[NodeCost], cost: str | None = None) -> int:
    """Sum of ``bytes_per_run`` (of one cost kind when given)."""
    return sum(r.bytes_per_run for r in rows if cost is None or r.cost == cost)


def clone_only_bytes_per_run(rows: list[NodeCost]) -> int:
    """What the old ``clone_bytes`` counted: the copy-in only (kept in the CSV to show the difference)."""
    return bytes_per_run(rows, "clone") + bytes_per_run(rows, "scatter_copy_in")


def kernel_bytes_per_run(report: CloneReport) -> int:
    """Inductor's kernel byte *estimate* over the run: per-call bytes of each region times its calls."""
    return sum(n * report.region_calls.get(region, 0) for region, n in report.region_kernel_bytes.items())


__all__ = [
    "NodeCost",
    "bytes_per_run",
    "charged_clones",
    "clone_only_bytes_per_run",
    "executed_clones",
    "kernel_bytes_per_run",
    "node_costs",
]
