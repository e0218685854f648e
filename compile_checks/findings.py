"""What the graph analysis reports: data only, no torch.compile here.

``SurvivingClone`` is one functionalization clone of a mutated argument that is
still in the final post-grad graph after Inductor's reinplace pass, i.e. a copy
of (a view of) a pool that runs every time the compiled region runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class SurvivingClone:
    """One clone that survived reinplacing.

    Attributes:
        op: the mutating custom op it feeds, e.g. ``"ar_paging::paged_write"``.
        arg: the op's mutated argument the clone stands in for, e.g. ``"v_pool"``.
        nbytes: bytes the clone copies (read once, written once: traffic = 2 * nbytes).
        shape / dtype: of the cloned buffer (the whole base storage for a fused layout).
        pool: name from the caller's ``pools={...}`` mapping whose storage it copies, else None.
        layer: layer index parsed from ``pool`` (``"layer3.v"`` -> 3) when it has one, else None.
        region: index of the compiled region (graph) it was found in, in compile order.
        node: name of the clone node in the post-grad graph.
        graph_file / line: where the node is in the dump (filled when dumps are written).
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
    explanation: Any = None  # compile_checks.explain.Explanation (why it survived, the fix)

    @property
    def traffic_bytes(self) -> int:
        """Memory traffic of one execution of the clone: it reads and writes ``nbytes``."""
        return 2 * self.nbytes

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


@dataclass
class CloneReport:
    """Everything one check found in one compiled function."""

    clones: list[SurvivingClone] = field(default_factory=list)
    mutated_args: list[MutatedArgRecord] = field(default_factory=list)
    num_regions: int = 0
    # region index -> how many times the compiled region ran during the check
    region_calls: dict[int, int] = field(default_factory=dict)
    # region index -> bytes Inductor's kernels account for (torch._inductor.metrics)
    region_kernel_bytes: dict[int, int] = field(default_factory=dict)
    dump_dir: str | None = None
    # what fn returned on the checked run (the pools were really written)
    output: Any = None
    # per region: the dump files (filled when dumps were written), see compile_checks.dumping
    region_files: dict[int, dict[str, str | None]] = field(default_factory=dict)
    # functionalization clones of caller tensors that match none of the named pools
    other_clones: list[SurvivingClone] = field(default_factory=list)
    # analysis caveats (e.g. the reinplace decision and the final graph disagree)
    notes: list[str] = field(default_factory=list)

    @property
    def clone_bytes(self) -> int:
        return sum(c.nbytes for c in self.clones)

    @property
    def clean(self) -> bool:
        return not self.clones

    def to_dict(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "clone_bytes": self.clone_bytes,
            "clones": [c.to_dict() for c in self.clones],
            "other_clones": [c.to_dict() for c in self.other_clones],
            "mutated_args": [asdict(m) for m in self.mutated_args],
            "num_regions": self.num_regions,
            "region_calls": {str(k): v for k, v in self.region_calls.items()},
            "region_kernel_bytes": {str(k): v for k, v in self.region_kernel_bytes.items()},
            "region_files": {str(k): v for k, v in self.region_files.items()},
            "dump_dir": self.dump_dir,
            "notes": list(self.notes),
        }
