"""What a finder reads: :class:`Evidence`, plain data gathered once per case (torch-free).

The same evidence exists wherever a verdict is rendered: in the process that ran the case, in a
``gate --jobs`` worker's :class:`~compile_checks.gate.outcome.Outcome`, in a shard's ``--json``
read back by ``merge``, in a ``scan`` of a trace. A finder reads only this, so each output computes
nothing of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Evidence:
    """Everything a case's finders read.

    Attributes:
        report: the checker's report as plain data (``CloneReport.to_dict()``; a ranked case's merged
            ``RankedResult.to_dict()``; a scan's per-graph record).
        copies: each surviving copy of a named pool (``compile_checks.verdict.copy_fields``; a scan's copy).
        other_copies: surviving copies of mutated inputs that match no named pool (same keys).
        undecided: what kept the check from a verdict that the report does not hold (a codegen smoke case
            without ``verify``, a warm-cache run that failed, a scan's refusal).
        notes: the run's and the analysis' caveats (never a failure).
        eager_match / max_abs_diff: the case's ``verify`` (None: not compared).
        rank: the rank this evidence is of (a ranked case's ranks), else None.
    """

    report: Mapping[str, Any] = field(default_factory=dict)
    copies: Sequence[Mapping[str, Any]] = ()
    other_copies: Sequence[Mapping[str, Any]] = ()
    undecided: Sequence[str] = ()
    notes: Sequence[str] = ()
    eager_match: bool | None = None
    max_abs_diff: float | None = None
    rank: int | None = None


__all__ = ["Evidence"]
