"""``gate --shard K/N``: a stable 1/N of the plan, for a CI matrix; ``merge`` puts the N results together.

Every shard plans the whole run (same targets, pipelines, mode, same ``--shard-timings`` file) and
keeps its part: cases are dealt longest first to the least loaded shard (ties: plan order, lowest
shard), so the split depends only on the plan and the timings. Without timings every case weighs
the same (a round robin in plan order); with them (a gate's or merge's ``--json`` output: each
case's ``label`` and ``wall_seconds``) each weighs its last run's seconds, a case the file lacks
the median. A shard's JSON carries ``shard``: its K, N and the plan's fingerprint and labels, which
is how ``merge`` tells a missing, duplicated or foreign shard from a complete set.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compile_checks.errors import UsageError
from compile_checks.gate.plan import GatePlan, PlannedCase


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"K/N"`` with 1 <= K <= N; anything else is a usage error."""
        k, sep, n = text.partition("/")
        if not sep or not k.isdigit() or not n.isdigit() or not 1 <= int(k) <= int(n):
            raise UsageError(f"--shard {text!r}: expected K/N with 1 <= K <= N (e.g. 1/2)")
        return cls(int(k), int(n))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def plan_fingerprint(cases: Sequence[PlannedCase]) -> str:
    """What must be equal across the shards of one run: each case's label, pipeline, expectation, mode."""
    rows = [(p.label, p.group, str(p.pipeline), p.expect_clean, p.analysis_only, p.codegen_smoke) for p in cases]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


def read_timings(path: Path) -> dict[str, float]:
    """``label -> wall_seconds`` from a gate's (or merge's) ``--json`` output."""
    try:
        doc = json.loads(path.read_text())
        return {str(c["label"]): float(c["wall_seconds"]) for c in doc["cases"]}
    except OSError as e:
        raise UsageError(f"--shard-timings {path}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(
            f"--shard-timings {path}: not a compile-checks --json output (cases[].label, cases[].wall_seconds): "
            f"{type(e).__name__}: {e}"
        ) from None


def assign(labels: Sequence[str], count: int, timings: Mapping[str, float] | None = None) -> list[int]:
    """The 0-based shard of each label: longest first to the least loaded shard (module docstring)."""
    timings = timings or {}
    known = [timings[label] for label in labels if label in timings]
    default = statistics.median(known) if known else 1.0
    weight = [timings.get(label, default) for label in labels]
    loads = [0.0] * count
    shard_of = [0] * len(labels)
    for i in sorted(range(len(labels)), key=lambda i: (-weight[i], i)):
        k = min(range(count), key=lambda s: (loads[s], s))
        shard_of[i] = k
        loads[k] += weight[i]
    return shard_of


def shard_plan(plan: GatePlan, shard: Shard, timings_path: Path | None = None) -> tuple[GatePlan, dict[str, Any]]:
    """This shard's part of ``plan``, and the ``shard`` entry of its JSON output."""
    labels = [p.label for p in plan.cases]
    timings = read_timings(timings_path) if timings_path is not None else None
    shard_of = assign(labels, shard.count, timings)
    mine = [p for p, k in zip(plan.cases, shard_of) if k == shard.index - 1]
    info = {
        "index": shard.index,
        "count": shard.count,
        "plan_fingerprint": plan_fingerprint(plan.cases),
        "plan_labels": labels,
        "balanced_by": str(timings_path) if timings_path is not None else None,
    }
    return GatePlan(cases=mine, preloaded=plan.preloaded, notes=list(plan.notes)), info


__all__ = ["Shard", "assign", "plan_fingerprint", "read_timings", "shard_plan"]
