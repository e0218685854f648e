"""What the write checks report: one :class:`WriteFinding` per problem (or attributed side-effect write).

Apart from the checks that produce it (compiled regions, the eager reference) because both return it
and the report serialises it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compile_checks.vocab import WriteProblem


@dataclass(frozen=True)
class WriteFinding:
    """One write problem (or one attributed side-effect write) the check saw.

    ``kind``: a :class:`WriteProblem`; ``fails``: whether it fails the case (an attributed vLLM
    side-effect write is reported, not failed); ``rows``: the pool's indices concerned along its dim
    ``details["dim"]`` (dim 0 where ``details`` names no dim).
    """

    kind: WriteProblem
    pool: str
    op: str
    message: str
    rows: tuple[int, ...] = ()
    nbytes: int = 0
    region: int | None = None
    fails: bool = True
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "pool": self.pool,
            "op": self.op,
            "message": self.message,
            "rows": list(self.rows),
            "nbytes": self.nbytes,
            "region": self.region,
            "fails": self.fails,
            "details": dict(self.details),
        }


__all__ = ["WriteFinding"]
