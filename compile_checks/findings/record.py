"""The one finding record and the verdict computed from a list of them. Torch-free plain data: a
:class:`Finding` crosses process boundaries (``gate --jobs``, ranks) and is what JSON serializes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from compile_checks.vocab import FinderSource, FindingKind

# what keeps the check from a verdict (rather than a verdict of its own)
UNDECIDED_KINDS: frozenset[FindingKind] = frozenset({FindingKind.UNDECIDED, FindingKind.POOL_NOT_RECEIVED})

COPY_KINDS: frozenset[FindingKind] = frozenset(
    {
        FindingKind.FUNCTIONALIZATION_CLONE,
        FindingKind.ATEN_WRITE_COPY,
        FindingKind.COLLECTIVE_COPY,
        FindingKind.POOL_REPLACED,
    }
)


@dataclass(frozen=True)
class Finding:
    """One thing the check found in one case.

    Attributes:
        kind: what it is (:class:`FindingKind`).
        message: one line for a person: what, where, how much (no cause or fix: those have their own fields).
        fails: whether it fails the case on its own; a copy never fails on its own: ``fails`` says whether
            it counts toward this case's copy verdict (judged against ``expect_clean``: see :class:`Verdict`;
            False: reported here, judged by another row, e.g. a scan's copy of a pool judged per pool).
            A note never fails.
        source: the finder family that produced it (graph, run, trace).
        pool: the named pool it concerns (never an ATen argument name), else None.
        layers: the layers it concerns, when the pool names them (``layer3.v`` -> 3) or a finding groups them.
        op / arg: the op (and its argument) involved, e.g. ``ar_paging::paged_write`` / ``v_pool``.
        bytes_per_call: bytes it moves in the heaviest call of its region (copies), else 0.
        bytes_per_run: bytes it moved over the whole run (each call that ran it, at that call's sizes).
        calls: how many calls of its region it concerns (None: not counted).
        region / node: the compiled region and the post-grad (or generated-code) node.
        cause: why (a :class:`compile_checks.vocab.Cause` value for copies, free text otherwise), else None.
        fix: what to change, else None.
        user_line: ``file:line`` in the user's code that the finding points at, else None.
        culprit: the compiler pass (class name) that caused it, when one did, else None.
        upper_bound: a copy the check could not settle against generated code (counted, an upper bound:
            a full compile's generated code settles it).
        details: anything else a renderer may show (positions, shapes, dtypes); plain JSON values.
    """

    kind: FindingKind
    message: str
    fails: bool = True
    source: FinderSource = FinderSource.GRAPH
    pool: str | None = None
    layers: tuple[int, ...] = ()
    op: str | None = None
    arg: str | None = None
    bytes_per_call: int = 0
    bytes_per_run: int = 0
    calls: int | None = None
    region: int | None = None
    node: str | None = None
    cause: str | None = None
    fix: str | None = None
    user_line: str | None = None
    culprit: str | None = None
    upper_bound: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_copy(self) -> bool:
        """A surviving copy of a pool (what ``expect_clean`` is about)."""
        return self.kind in COPY_KINDS

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(kind=str(self.kind), source=str(self.source), layers=list(self.layers), details=dict(self.details))
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        return cls(
            **{
                **d,
                "kind": FindingKind(d["kind"]),
                "source": FinderSource(d.get("source", FinderSource.GRAPH)),
                "layers": tuple(d.get("layers") or ()),
                "details": dict(d.get("details") or {}),
            }
        )


@dataclass(frozen=True)
class Verdict:
    """What a case's findings come to, computed once: every output renders this.

    The exit codes keep :attr:`verdict_met` and :attr:`passed` apart (1: a verdict not met, 5: compiled != eager).

    Attributes:
        findings: every finding of the case, in finder order.
        expect_clean: the case expects no surviving pool copy (False: a negative control).
    """

    findings: tuple[Finding, ...]
    expect_clean: bool

    @classmethod
    def of(cls, findings: Iterable[Finding], *, expect_clean: bool) -> Verdict:
        return cls(tuple(findings), expect_clean)

    @property
    def copies(self) -> tuple[Finding, ...]:
        """The surviving copies this case is judged on."""
        return tuple(f for f in self.findings if f.is_copy and f.fails)

    @property
    def clean(self) -> bool:
        """No counted pool copy survived."""
        return not self.copies

    @property
    def failing(self) -> tuple[Finding, ...]:
        """Findings that fail the case whatever it expects (lost writes, undecided regions, a mismatch ...);
        in ``to_dict``: their kinds."""
        return tuple(f for f in self.findings if f.fails and not f.is_copy)

    @property
    def undecided(self) -> tuple[Finding, ...]:
        """What kept the check from a verdict (an error, a region not analysed, a pool not received)."""
        return tuple(f for f in self.failing if f.kind in UNDECIDED_KINDS)

    @property
    def verdict_met(self) -> bool:
        """The copy verdict is the expected one, and nothing but an eager mismatch fails."""
        return self.clean == self.expect_clean and all(f.kind == FindingKind.MISMATCH for f in self.failing)

    @property
    def passed(self) -> bool:
        """The verdict met, and nothing fails (compiled == eager where compared)."""
        return self.verdict_met and not self.failing

    @property
    def notes(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.fails and not f.is_copy)

    def of_kind(self, *kinds: FindingKind) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.kind in kinds)

    def to_dict(self) -> dict[str, Any]:
        """The verdict's decisions (the findings themselves are listed once, beside it)."""
        return {
            "clean": self.clean,
            "verdict_met": self.verdict_met,
            "passed": self.passed,
            "expect_clean": self.expect_clean,
            "failing": sorted({str(f.kind) for f in self.failing}),
        }


def findings_from_dicts(items: Sequence[Mapping[str, Any]]) -> list[Finding]:
    return [Finding.from_dict(d) for d in items]


__all__ = ["COPY_KINDS", "UNDECIDED_KINDS", "Finding", "Verdict", "findings_from_dicts"]
