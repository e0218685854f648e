"""What the graph analysis reports: data only, no torch.compile here.

``SurvivingClone`` is one whole-buffer copy of a mutated caller tensor that is still in
the final post-grad graph after Inductor's reinplace pass, i.e. a copy of (a view of) a
pool that runs every time the compiled region runs: a functionalization clone of a
custom op's mutated argument (``kind="functionalization_clone"``) or an ATen write left
functional (``kind="aten_write_copy"``, e.g. ``index_put``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from compile_checks.findings import Evidence, Finding, Verdict, kind_name, verdict_of
from compile_checks.findings.record import UNDECIDED_KINDS
from compile_checks.vocab import CopyKind


def problem_line(f: Finding) -> str:
    """A failing finding as ``CloneReport.problems`` lists it: what kept the check from a verdict as it was
    said (``not analysed: ...``, an error), every other finding ``kind: message``."""
    if f.kind in UNDECIDED_KINDS and "reported_kind" not in f.details:
        return f.message
    return f"{kind_name(f)}: {f.message}"


@dataclass(frozen=True)
class SurvivingClone:
    """One pool-sized copy that survived reinplacing.

    Attributes:
        op: the mutating op it feeds, e.g. ``"ar_paging::paged_write"``, or the functional
            ATen write that copies the buffer, e.g. ``"aten::index_put"``.
        arg: the op's mutated argument the clone stands in for, e.g. ``"v_pool"`` (``"self"``
            for an ATen write).
        nbytes: bytes the clone copies on a call (read once, written once: traffic = 2 * nbytes),
            from that call's runtime sizes.
        shape / dtype: of the cloned buffer (the whole base storage for a fused layout).
        pool: name from the caller's ``pools={...}`` mapping whose storage it copies, else None.
        layer: layer index parsed from ``pool`` (``"layer3.v"`` -> 3) when it has one, else None.
        region: index of the compiled region (graph) it was found in, in compile order.
        node: name of the clone node in the post-grad graph.
        graph_file / line: where the node is in the dump (filled when dumps are written).
        kind: ``"functionalization_clone"``, ``"aten_write_copy"`` or ``"collective_copy"`` (:class:`CopyKind`).
        written_bytes: bytes the ``copy_`` epilogue writes back into the pool per call (0: none).
        calls: how many calls of its region ran this copy with this pool and these bytes (a graph called
            once per layer lists one entry per layer, each with its own calls); None: every call of the
            region (a finding built by hand).
        upper_bound: whether the buffer is Inductor's lowering choice that no generated code settled: such an
            entry is listed in ``CloneReport.undecided``, never counted as a copy (nor as none).
        input: the caller's tensor it copies, as the caller wrote it (dynamo's source: ``kv_cache['full_cache']``),
            else ``input N`` (the region's N-th input): what names it where no pool does.
    """

    op: str
    arg: str
    nbytes: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    pool: str | None = None
    layer: int | None = None
    region: int = 0
    node: str = ""
    graph_file: str | None = None
    line: int | None = None
    kind: CopyKind = CopyKind.FUNCTIONALIZATION_CLONE
    written_bytes: int = 0
    explanation: Any = None  # compile_checks.explain.explanations.Explanation (why it survived, the fix)
    calls: int | None = None
    upper_bound: bool = False
    input: str | None = None

    @property
    def traffic_bytes(self) -> int:
        """Memory traffic of one execution of the clone: it reads and writes ``nbytes``."""
        return 2 * self.nbytes

    def fields(self) -> dict[str, Any]:
        """A surviving copy as plain data: the gate's JSON ``clones`` entries, what
        :func:`compile_checks.verdict.render_copy` reads.

        ``where``: ``file:line`` in the dump, else ``region R node N``; ``explanation``: its one-line
        summary (None when the check ran without explanations); ``cause``: why it survived (a ``Cause``);
        ``fix``: what to change; ``user_line``: ``file:line`` of the mutating call in the model;
        ``culprit``: the compiler pass that caused it (each None when not explained).
        """
        where = f"{self.graph_file}:{self.line}" if self.graph_file else f"region {self.region} node {self.node}"
        return {
            "op": self.op,
            "arg": self.arg,
            "pool": self.pool,
            "nbytes": self.nbytes,
            "kind": self.kind,
            "written_bytes": self.written_bytes,
            "where": where,
            "explanation": self.explanation.summary() if self.explanation is not None else None,
            # the explanation's parts, as each copy's finding carries them (compile_checks.findings)
            "cause": str(self.explanation.cause) if self.explanation is not None else None,
            "fix": self.explanation.fix if self.explanation is not None else None,
            "user_line": self.explanation.user_line if self.explanation is not None else None,
            "culprit": self.explanation.culprit_pass if self.explanation is not None else None,
            "shape": list(self.shape),
            "dtype": str(self.dtype).removeprefix("torch."),
            "region": self.region,
            "node": self.node,
            "calls": self.calls,
            "upper_bound": self.upper_bound,
            "input": self.input,
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["explanation"] = self.explanation.to_dict() if self.explanation is not None else None
        d["dtype"] = str(self.dtype).removeprefix("torch.")
        d["shape"] = list(self.shape)
        return d


@dataclass(frozen=True)
class MutatedArgRecord:
    """For each mutated argument of each functionalized op call: re-inplaced or cloned."""

    op: str
    arg: str
    reinplaced: bool
    region: int = 0
    pool: str | None = None


@dataclass(frozen=True)
class RegionSources:
    """The code of one compiled region as the check saw it: what a dump is written from when depyf's is
    missing (:func:`compile_checks.explain.dumps.write_fallback_files`). Never serialized."""

    compiled_fn_name: str
    compile_seconds: float = 0.0
    captured: str = ""  # the dynamo graph's code
    post_grad: tuple[str, ...] = ()  # each inner graph's final post-grad code (what Inductor lowers)
    generated: tuple[str, ...] = ()  # Inductor's generated code of each inner graph (full compile only)


@dataclass
class CloneReport:
    """Everything one check found in one compiled function."""

    # each surviving copy of a named pool (of any mutated input when no pools are named)
    clones: list[SurvivingClone] = field(default_factory=list)
    # each mutated argument of each functionalized op call: op, arg, region, pool, reinplaced or cloned
    mutated_args: list[MutatedArgRecord] = field(default_factory=list)
    # compiled regions (dynamo graphs) the check saw
    num_regions: int = 0
    # region index -> how many times the compiled region ran during the check
    region_calls: dict[int, int] = field(default_factory=dict)
    # region index -> bytes Inductor's kernels account for (torch._inductor.metrics)
    region_kernel_bytes: dict[int, int] = field(default_factory=dict)
    # the dump folder (graphs, generated code, index.md) when dumps were written
    dump_dir: str | None = None
    # what fn returned on the checked run (the pools were really written)
    output: Any = None
    # per region: the dump files (filled when dumps were written), see compile_checks.explain.dumps
    region_files: dict[int, dict[str, str | None]] = field(default_factory=dict)
    # functionalization clones of caller tensors that match none of the named pools
    other_clones: list[SurvivingClone] = field(default_factory=list)
    # copies whose buffer is Inductor's lowering choice that no generated code settled (``upper_bound``): neither
    # a copy nor none, each with a note saying why; never in ``clones``
    undecided: list[SurvivingClone] = field(default_factory=list)
    # analysis caveats (e.g. the reinplace decision and the final graph disagree)
    notes: list[str] = field(default_factory=list)
    # regions / ops the check could not analyse, each with its reason; they fail the check
    # unless allow_unanalysed
    unanalysed: list[str] = field(default_factory=list)
    # unanalysed regions are accepted (Case.allow_unanalysed): listed, not failing
    allow_unanalysed: bool = False
    # named pools no compiled region received on any call (a stale or rebuilt tensor)
    unreceived_pools: list[str] = field(default_factory=list)
    # region index -> seconds per phase (compile_checks.vocab.Phase: codegen only in a full compile)
    region_phase_seconds: dict[int, dict[str, float]] = field(default_factory=dict)
    # what makes the check fail besides clones (unreceived pools, unresolvable sizes ...)
    errors: list[str] = field(default_factory=list)
    # write and recompile findings (check.writes.WriteFinding, check.recompiles.RecompileFinding); ``fails`` ones fail
    run_findings: list[Any] = field(default_factory=list)
    # code -> {"graphs": n, "reasons": [guard failures], ...} (check.recompiles.recompile_table)
    recompiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    # what went wrong writing the dumps (depyf's error); never a check failure: the verdict stands
    dump_failures: list[str] = field(default_factory=list)
    # region index -> its code (dumps are written from it); not in to_dict
    sources: dict[int, RegionSources] = field(default_factory=dict, repr=False)

    @property
    def clone_bytes(self) -> int:
        """Bytes the surviving copies move in the heaviest call of each region that has one, summed over
        regions. A call runs each copy node once: a node listed once per pool it hit on different calls (a
        graph called once per layer, a symbolic graph serving pools of several sizes) counts once, at its
        largest (the rule of :func:`compile_checks.verdict.bytes_by_region`)."""
        largest: dict[tuple[int, str], int] = {}
        for c in self.clones:
            key = (c.region, c.node or f"#{id(c)}")
            largest[key] = max(largest.get(key, 0), c.nbytes)
        return sum(largest.values())

    @property
    def clone_bytes_per_run(self) -> int:
        """Bytes the copies moved over the whole run: each entry's bytes times the calls that ran it (the
        pool each call received, at that call's sizes). An entry without ``calls`` (built by hand) is charged
        every call of its region, once per copy node."""
        total, seen = 0, set()
        for c in self.clones:
            if c.calls is not None:
                total += c.nbytes * c.calls
            elif not c.node or (c.region, c.node) not in seen:
                seen.add((c.region, c.node))
                total += c.nbytes * self.region_calls.get(c.region, 1)
        return total

    @property
    def clean(self) -> bool:
        """No pool copy survived: neither of a named pool nor of another mutated caller tensor."""
        return not self.clones and not self.other_clones

    def evidence(
        self, *, notes: Sequence[str] = (), eager_match: bool | None = None, max_abs_diff: float | None = None
    ) -> Evidence:
        """What the finders read of this report (plain data), with the run's own ``notes`` and ``verify``."""
        return Evidence(
            report=self.data(),
            copies=[c.fields() for c in self.clones],
            other_copies=[c.fields() for c in self.other_clones],
            notes=[*notes, *self.notes],
            eager_match=eager_match,
            max_abs_diff=max_abs_diff,
        )

    @property
    def verdict(self) -> Verdict:
        """The report's findings and what they come to for a case expecting no copy
        (:class:`compile_checks.findings.Verdict`; a case's own expectation: ``CaseResult.verdict``)."""
        return verdict_of(self.evidence(), expect_clean=True)

    @property
    def problems(self) -> list[str]:
        """Everything besides copies that fails the check, one line each: errors, unanalysed regions unless
        allowed, unreceived pools, failing write and recompile findings (the verdict's failing findings)."""
        return [problem_line(f) for f in self.verdict.failing]

    @property
    def check_passed(self) -> bool:
        """Clean, no errors, and nothing left unanalysed (unless allowed)."""
        return self.verdict.passed

    def to_dict(self) -> dict[str, Any]:
        return {"clean": self.clean, "check_passed": self.check_passed, **self.data()}

    def data(self) -> dict[str, Any]:
        """What the report holds, as plain data (:meth:`to_dict` without the verdict it comes to)."""
        return {
            "clone_bytes": self.clone_bytes,
            "clone_bytes_per_run": self.clone_bytes_per_run,
            "clones": [c.to_dict() for c in self.clones],
            "other_clones": [c.to_dict() for c in self.other_clones],
            "undecided": [c.to_dict() for c in self.undecided],
            "mutated_args": [asdict(m) for m in self.mutated_args],
            "num_regions": self.num_regions,
            "region_calls": {str(k): v for k, v in self.region_calls.items()},
            "region_kernel_bytes": {str(k): v for k, v in self.region_kernel_bytes.items()},
            "region_files": {str(k): v for k, v in self.region_files.items()},
            "dump_dir": self.dump_dir,
            "notes": list(self.notes),
            "unanalysed": list(self.unanalysed),
            "allow_unanalysed": self.allow_unanalysed,
            "unreceived_pools": list(self.unreceived_pools),
            "region_phase_seconds": {str(k): dict(v) for k, v in self.region_phase_seconds.items()},
            "errors": list(self.errors),
            "run_findings": [f.to_dict() for f in self.run_findings],
            "recompiles": {k: dict(v) for k, v in self.recompiles.items()},
            "dump_failures": list(self.dump_failures),
        }
