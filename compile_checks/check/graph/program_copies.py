"""Pool-sized buffers the program itself makes from a pool: traffic per call, named by pool.

A ring cache that evicts with ``cache.copy_(torch.roll(cache, -n, 0))`` and then attends over the
window asks Inductor for buffers the size of the cache on every call: the roll's result (computed
before it is written back) and, for an attention kernel that takes its input in another layout or
before the write-back, a second copy of the window. None of them is a copy the reinplace pass could
have avoided (so none is a ``clone``), but each is memory traffic per step.

The generated code is the truth (a full compile, or the code the default mode generates to settle a
region): every buffer Inductor's scheduler gives memory of its own that it computed elementwise (a
``Pointwise`` buffer: a gather, a roll, a layout copy, ``k * 1``) from a graph input, at least as big as
that input, is one (:func:`code_program_copies`); a buffer that stands for a
pool copy already reported (its clone site), or that the region returns, is not. Without generated code
(analysis-only) the post-grad graph shows the ones it can (:mod:`.own_copies`: a roll written back, a
clone written and kept): Inductor makes each of them, but a layout copy for a kernel's input is not in
the graph, so ``--full`` may count more. Each call's inputs name the pool
(:class:`ProgramCopyRecorder`); they never fail a case unless it asks (``Case.fail_on_program_copies``,
``gate --fail-on-program-copies``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from compile_checks.check.graph.own_copies import OwnCopy
from compile_checks.check.storage_identity import storage_key


@dataclass(frozen=True)
class ComputedInfo:
    """One buffer Inductor lowered, as :func:`computed_buffers` reads it: what it reads, its bytes, and
    whether it is computed elementwise (a ``Pointwise`` loop: a copy, a gather, a pointwise op)."""

    reads: frozenset[str]
    nbytes: int | None
    pointwise: bool
    origins: frozenset[str] = frozenset()
    readers: tuple[str, ...] = ()  # the extern kernels (an attention op ...) that take it as an input
    returned: bool = False  # the graph returns it: the region's output, not a temporary


@dataclass(frozen=True)
class ProgramCopySite:
    """One pool-sized buffer of a compiled graph, computed from the graph input ``placeholder``."""

    buffer: str  # bufN in the generated code; the post-grad node's name without one (analysis-only)
    placeholder: str
    placeholder_index: int
    nbytes: int
    what: str  # how the program makes it, for the report line
    graph_only: bool = False  # read from the post-grad graph (analysis-only): the generated code may hold more


@dataclass(frozen=True)
class ProgramCopy:
    """A :class:`ProgramCopySite` on the calls that ran it with one pool: the report's record."""

    region: int
    buffer: str
    pool: str | None
    nbytes: int
    calls: int
    what: str
    graph_only: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def computed_buffers(graph_lowering: Any) -> dict[str, ComputedInfo]:
    """Name -> :class:`ComputedInfo` of every buffer a ``GraphLowering`` registered (read after its codegen)."""
    from torch._inductor import ir

    buffers: list[tuple[str, Any, frozenset[str]]] = []
    readers: dict[str, list[str]] = {}
    for buf in getattr(graph_lowering, "buffers", ()):
        try:
            name = buf.get_name()
            reads = frozenset(buf.get_read_names())
        except Exception:  # a buffer without a name or reads is none the code allocates for a loop
            continue
        buffers.append((name, buf, reads))
        if isinstance(buf, ir.ExternKernel):
            op = str(getattr(buf, "op_overload", None) or getattr(buf, "python_kernel_name", None) or "")
            for read in _input_names(buf):
                readers.setdefault(read, []).append(op.removeprefix("torch.ops.").removesuffix(".default"))
    returned = set()
    for output in getattr(graph_lowering, "graph_outputs", ()) or ():
        try:
            returned.add(output.get_name())
        except Exception:  # a constant or a symbolic size: no buffer
            continue
    out: dict[str, ComputedInfo] = {}
    for name, buf, reads in buffers:
        pointwise = isinstance(buf, ir.ComputedBuffer) and type(getattr(buf, "data", None)) is ir.Pointwise
        origins = frozenset(o.name for o in getattr(buf, "origins", ()) or () if hasattr(o, "name"))
        out[name] = ComputedInfo(
            reads, _bytes(graph_lowering, buf), pointwise, origins, tuple(readers.get(name, ())), name in returned
        )
    return out


def _input_names(kernel: Any) -> set[str]:
    """The buffers an extern kernel takes as inputs (its own ``get_read_names`` may name only itself)."""
    names = set()
    for value in getattr(kernel, "inputs", ()) or ():
        try:
            names.add(value.get_name())
        except Exception:  # a constant, a size: no buffer
            continue
    return names


def input_bytes(graph_lowering: Any) -> dict[str, int | None]:
    """Graph input name -> its bytes at the size hints (None: no tensor), in placeholder order."""
    out: dict[str, int | None] = {}
    for name in getattr(graph_lowering, "graph_input_names", ()):
        box = graph_lowering.graph_inputs.get(name)
        out[name] = _bytes(graph_lowering, box) if box is not None else None
    return out


def _bytes(graph_lowering: Any, buf: Any) -> int | None:
    try:
        size = buf.get_size()
        numel = math.prod(size) if size else 1
        sizevars = graph_lowering.sizevars
        hint_of = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
        return int(hint_of(numel, fallback=None)) * buf.get_dtype().itemsize
    except Exception:  # no layout (a multi-output node), no hint: size unknown, never counted
        return None


def code_program_copies(
    buffers: Mapping[str, ComputedInfo],
    allocated: Collection[str],
    inputs: Mapping[str, int | None],
    claimed: Iterable[str] = (),
) -> list[ProgramCopySite]:
    """The pool-sized buffers the generated code gives memory (``allocated``: Inductor's scheduler says, as
    :func:`compile_checks.check.graph.generated_buffers.lowered_buffers` reads it) computed from a graph input.

    ``inputs``: graph input name -> bytes (None: no tensor), in placeholder order; ``claimed``: post-grad
    nodes of the copy sites already reported (their buffers are those copies, not the program's own).
    """
    claimed = set(claimed)
    order = list(inputs)
    sizes = {n: b for n, b in inputs.items() if b}
    sites: list[ProgramCopySite] = []
    for name in sorted(allocated, key=_buffer_number):
        info = buffers.get(name)
        if info is None or not info.pointwise or info.nbytes is None or info.returned or info.origins & claimed:
            continue
        sources = [p for p in _inputs_read(name, buffers, sizes) if info.nbytes >= sizes[p]]
        if not sources:
            continue
        source = max(sources, key=lambda p: (sizes[p], -order.index(p)))
        sites.append(ProgramCopySite(name, source, order.index(source), info.nbytes, _what(info, source)))
    return sites


def graph_program_copies(records: Sequence[OwnCopy], placeholders: Sequence[str]) -> list[ProgramCopySite]:
    """The analysis-only sites: what the post-grad graph shows (:func:`.own_copies.own_copy_records`)."""
    return [
        ProgramCopySite(r.node, r.placeholder, placeholders.index(r.placeholder), r.nbytes, r.what, graph_only=True)
        for r in records
        if r.placeholder in placeholders
    ]


def _buffer_number(name: str) -> tuple[int, str]:
    digits = name.removeprefix("buf")
    return (int(digits), name) if digits.isdigit() else (1 << 30, name)


def _inputs_read(name: str, buffers: Mapping[str, ComputedInfo], inputs: Mapping[str, Any]) -> set[str]:
    """The graph inputs ``name`` is computed from, through the buffers it reads (transitively)."""
    seen: set[str] = set()
    found: set[str] = set()
    todo = [name]
    while todo:
        cur = todo.pop()
        for read in buffers[cur].reads if cur in buffers else ():
            if read in inputs:
                found.add(read)
            elif read in buffers and read not in seen:
                seen.add(read)
                todo.append(read)
    return found


def _what(info: ComputedInfo, source: str) -> str:
    """How the program makes the buffer (the line names the pool): the op that takes it as its input, else a
    fused kernel's temporary."""
    if info.readers:
        return f"a copy of the pool as the input of {info.readers[0]}"
    also = " (with other inputs)" if len(info.reads - {source}) else ""
    return f"computed from the pool{also} into a buffer of its own (a roll, a gather, a layout change)"


@dataclass
class ProgramCopyRecorder:
    """Names the pool behind each site on every call of one compiled graph (counts calls per pool).

    ``pools``: a :class:`compile_checks.check.runtime_pools.PoolIndex`; without named pools every site
    counts, unnamed, where its input is one the graph writes (``mutated``).
    """

    pools: Any
    sites: Sequence[ProgramCopySite]
    mutated: frozenset[str] = frozenset()
    hits: dict[tuple[int, str | None], int] = field(default_factory=dict)
    _seen: dict[tuple[Any, ...], tuple[tuple[int, str | None], ...]] = field(default_factory=dict)

    def observe(self, args: Sequence[object]) -> None:
        if not self.sites:
            return
        tensors = [args[s.placeholder_index] if s.placeholder_index < len(args) else None for s in self.sites]
        key = tuple(
            (storage_key(t), t.storage_offset(), tuple(t.shape)) if isinstance(t, torch.Tensor) else None
            for t in tensors
        )
        hits = self._seen.get(key)
        if hits is None:
            found: list[tuple[int, str | None]] = []
            for i, (site, t) in enumerate(zip(self.sites, tensors)):
                if not isinstance(t, torch.Tensor):
                    continue
                if self.pools:
                    names = self.pools.touched(t)
                    if names:
                        found.append((i, ", ".join(sorted(names))))
                elif site.placeholder in self.mutated:
                    found.append((i, None))
            hits = self._seen[key] = tuple(found)
        for hit in hits:
            self.hits[hit] = self.hits.get(hit, 0) + 1

    def copies(self, region: int) -> list[ProgramCopy]:
        out = []
        for (i, pool), calls in sorted(self.hits.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            s = self.sites[i]
            out.append(ProgramCopy(region, s.buffer, pool, s.nbytes, calls, s.what, s.graph_only))
        return out


__all__ = [
    "ComputedInfo",
    "ProgramCopy",
    "ProgramCopyRecorder",
    "ProgramCopySite",
    "code_program_copies",
    "computed_buffers",
    "graph_program_copies",
    "input_bytes",
]
