"""The buffers Inductor's generated code gives memory, to settle what the post-grad graph cannot.

Whether a view scatter gets a buffer of its own is Inductor's lowering choice
(:attr:`CloneSite.buffer_is_inductors_choice`): it may compute the scatter inside its readers and the
write-back (no buffer), or realize it (a pool-sized buffer that the write-back copies from).

A site is settled by identity (:func:`settle_by_identity`) when Inductor generates its code: its IR
records, for every buffer it lowered, the post-grad nodes it was computed from (``origins``), and its
scheduler which buffers the code gives memory of their own (:func:`lowered_buffers`, read when the code
is generated, whatever the wrapper: the Python wrapper's ``empty_strided_*``, the C++ wrapper's
``aoti_torch_empty_strided``, an extern or fallback kernel's result such as ``buf1 =
torch.ops.aten.clone.default(buf0)``, a ``MultiOutput`` of one, a buffer placed in a dead one's memory).
The copy is confirmed when such a buffer is computed from the site's node and is at least as big as the
copy; an unrelated activation of the pool's byte size (an SDPA window, a returned tensor) is never taken
for it. Without those records (the code of a trace) the old rule applies to the sites that are Inductor's
choice: a buffer of the site's byte size in the Python wrapper's text (:func:`settle_inductors_choices`);
where no code says, the site is an upper bound with its reason (:func:`upper_bound_note`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from compile_checks.check.graph.sites import CloneSite

# the Python wrapper's allocation (CPU / CUDA / XPU ...); dims are ints, or sizes like s0 when symbolic
_ALLOC = re.compile(r"^\s*(\w+) = empty_strided_\w+\(\(([^)]*)\), \([^)]*\), (?:device=[^,]+, )?torch\.(\w+)\)", re.M)
_REUSE = re.compile(r"^\s*(\w+) = (\w+); del \2  # reuse", re.M)
# a buffer's memory under another shape (``buf12 = reinterpret_tensor(buf10, (4, 16), (16, 1), 0)``): its storage
_REINTERPRET = re.compile(r"^\s*(\w+) = reinterpret_tensor\((\w+), ", re.M)


@dataclass(frozen=True)
class LoweredBuffer:
    """One buffer of Inductor's IR: the post-grad nodes it was computed from, its bytes (a symbolic size at
    its hint; None when unknown), and whether the generated code gives it memory of its own."""

    origins: frozenset[str]
    nbytes: int | None
    allocated: bool = False


def lowered_buffers(graph_lowering: Any) -> dict[str, LoweredBuffer]:
    """Name -> :class:`LoweredBuffer` for every buffer a ``GraphLowering`` registered (read after its codegen)."""
    owned = _owned_buffers(graph_lowering)
    out: dict[str, LoweredBuffer] = {}
    for buf in getattr(graph_lowering, "buffers", ()):
        try:
            name = buf.get_name()
        except Exception:  # an unnamed buffer is never in the code
            continue
        origins = {o.name for o in getattr(buf, "origins", ()) or () if hasattr(o, "name")}
        data = getattr(buf, "data", None)
        origins |= {o.name for o in getattr(data, "origins", ()) or () if hasattr(o, "name")}
        out[name] = LoweredBuffer(frozenset(origins), _buffer_bytes(graph_lowering, buf), name in owned)
    return out


def _owned_buffers(graph_lowering: Any) -> set[str]:
    """Names of the buffers the generated code gives memory of their own, by Inductor's scheduler.

    Every output of a scheduled node, unless Inductor removed it (computed inside the kernel that reads it,
    or written in place into another buffer: ``removed_buffers``, ``inplaced_to_remove``), it is no memory
    (a mutation of another buffer, a view of one, the tuple a multi-output kernel returns), or it aliases one
    of the kernel's inputs (an extern kernel returning a view, ``aten.copy_`` returning its ``self``). The same
    for every wrapper: an allocation, an extern or fallback kernel's result, a ``MultiOutput`` of one, a
    buffer placed in a dead one's memory (reuse).
    """
    from torch._inductor import ir

    scheduler = getattr(graph_lowering, "scheduler", None)
    if scheduler is None:
        return set()
    removed = set(graph_lowering.removed_buffers) | set(graph_lowering.inplaced_to_remove)
    out: set[str] = set()
    for node in scheduler.nodes:
        for output in node.get_outputs():
            buf = output.node
            name = buf.get_name()
            layout = buf.get_output_spec()
            if name in removed or not isinstance(layout, ir.Layout):  # NoneLayout, MultiOutputLayout
                continue
            if isinstance(layout, (ir.NonOwningLayout, ir.MutationLayoutSHOULDREMOVE)):
                continue
            try:
                aliases = buf.get_inputs_that_alias_output()
            except NotImplementedError:  # Inductor does not say: memory of its own (never dropped on a doubt)
                aliases = ()
            if not aliases:
                out.add(name)
    return out


def _buffer_bytes(graph_lowering: Any, buf: Any) -> int | None:
    try:
        numel = math.prod(buf.get_size()) if buf.get_size() else 1
        sizevars = graph_lowering.sizevars
        hint_of = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
        return int(hint_of(numel, fallback=None)) * buf.get_dtype().itemsize
    except Exception:  # no layout (a mutation or multi-output node), no hint: size unknown
        return None


def settle_by_identity(
    sites: Sequence[CloneSite], buffers: Mapping[str, LoweredBuffer]
) -> tuple[list[CloneSite], list[str]]:
    """The sites whose copy the generated code holds in memory of its own, and a note for each it does not.

    Confirmed: the code gives memory to a buffer (:attr:`LoweredBuffer.allocated`) computed from the site's
    node, or from a write it scatters (:attr:`CloneSite.feeds`: ``index_put`` into ``k.unsqueeze(0)[0]``),
    per its IR origins, at least as big as the copy at its hint (or of unknown size: never dropped on a
    doubt). Every site is settled so, certain or Inductor's choice: the code is the truth.
    """
    free = {n: b for n, b in sorted(buffers.items()) if b.allocated}
    kept: list[CloneSite] = []
    notes: list[str] = []
    # one buffer is one copy: certain sites claim theirs first, then Inductor's choices
    for site in sorted(sites, key=lambda s: s.buffer_is_inductors_choice):
        size = _nbytes(site)
        names = {site.clone_node, *site.feeds}
        hit = next(
            (
                n
                for n, b in free.items()
                if names & b.origins and (b.nbytes is None or size is None or b.nbytes >= size)
            ),
            None,
        )
        if hit is not None:
            del free[hit]
            kept.append(dataclasses.replace(site, buffer_is_inductors_choice=False))  # settled: certain
        else:
            notes.append(
                f"{site.clone_node}: {site.op} into {site.placeholder}: the generated code allocates no buffer "
                f"computed from it{f' of {size} bytes' if size is not None else ''} (Inductor computed it inside "
                "its readers and the write-back), so it is no copy"
            )
    order = {s.clone_node: i for i, s in enumerate(sites)}
    return sorted(kept, key=lambda s: order[s.clone_node]), notes


def allocated_bytes(code: str) -> Counter[int | None] | None:
    """How many buffers of each byte size the code allocates or reuses (``None``: a symbolic size).

    None when the code is not a Python wrapper we can read (no allocation and no ``def call``).
    """
    if "def call(" not in code:
        return None
    sizes: dict[str, int | None] = {}
    counts: Counter[int | None] = Counter()
    for line in code.splitlines():  # in the code's order: a reuse or a reinterpretation of a reuse resolves
        if alloc := _ALLOC.match(line):
            name, shape, dtype = alloc.groups()
            dims = [d.strip() for d in shape.split(",") if d.strip()]
            item = getattr(torch, dtype, None)
            if item is None or not isinstance(item, torch.dtype) or not all(d.isdigit() for d in dims):
                sizes[name] = None
            else:
                sizes[name] = math.prod(int(d) for d in dims) * item.itemsize
            counts[sizes[name]] += 1
        elif reuse := _REUSE.match(line):
            new, old = reuse.groups()
            sizes[new] = sizes.get(old)
            counts[sizes[new]] += 1
        elif alias := _REINTERPRET.match(line):  # the same memory under another shape: no buffer of its own
            sizes.setdefault(alias.group(1), sizes.get(alias.group(2)))
    return counts


def settle_inductors_choices(sites: Sequence[CloneSite], code: str) -> tuple[list[CloneSite], list[str]]:
    """The sites the generated code confirms, and a note for each choice it shows Inductor did not take.

    A site whose buffer is Inductor's choice is confirmed while the code allocates more buffers of its
    byte size than the certain sites of that size account for; a symbolic-size buffer, or code we
    cannot read, confirms every such site (never dropped on a doubt).
    """
    choices = [s for s in sites if s.buffer_is_inductors_choice]
    counts = allocated_bytes(code) if choices else None
    if counts is None or counts.get(None):
        return list(sites), []
    certain: Counter[int] = Counter(_nbytes(s) for s in sites if not s.buffer_is_inductors_choice)  # type: ignore[misc]
    spare = {size: n - certain.get(size, 0) for size, n in counts.items() if size is not None}
    kept: list[CloneSite] = []
    notes: list[str] = []
    # the chain's last scatter (the one its write-back copies: ``written`` set) is computed inside the write-back's
    # kernel when the code has fewer buffers than choices (paged_lm: ``cpp_fused_add_copy__5`` stores
    # ``select_scatter_default_7`` straight into the input), so the earlier scatters take the spare buffers first
    for site in sorted(sites, key=lambda s: bool(s.buffer_is_inductors_choice and s.written)):
        size = _nbytes(site)
        if not site.buffer_is_inductors_choice or size is None:
            kept.append(site)
        elif spare.get(size, 0) > 0:
            spare[size] -= 1
            kept.append(site)
        else:
            notes.append(
                f"{site.clone_node}: {site.op} into {site.placeholder} is read only through sub-views besides its "
                f"write-back, and Inductor computed it inside its readers: the generated code has no {size}-byte "
                "buffer for it, so it is no copy"
            )
    order = {s.clone_node: i for i, s in enumerate(sites)}
    return sorted(kept, key=lambda s: order[s.clone_node]), notes


def upper_bound_note(site: CloneSite) -> str:
    """What a scan of a trace without Inductor's output code says of a site that is Inductor's choice."""
    return (
        f"{site.clone_node}: {site.op} into {site.placeholder} {_reason(site)}: Inductor may compute it inside "
        "its readers and the write-back with no buffer, or realize it in a pool-sized one; counted as a copy (an "
        "upper bound): a trace with Inductor's output code settles it"
    )


def undecided_note(site: CloneSite, why: str) -> str:
    """What the live check says of a site that is Inductor's choice when no generated code settled it: it is
    undecided (never counted as a copy, never as none), and why the code is missing."""
    return (
        f"{site.clone_node}: {site.op} into {site.placeholder} {_reason(site)}: undecided, not counted as a copy: "
        f"only Inductor's generated code says whether it gets a buffer, and {why}"
    )


def _reason(site: CloneSite) -> str:
    return site.choice_reason or "is read only through sub-views besides its write-back"


def _nbytes(site: CloneSite) -> int | None:
    try:
        return int(site.clone.nbytes)
    except (TypeError, ValueError):
        return None


__all__ = [
    "LoweredBuffer",
    "allocated_bytes",
    "lowered_buffers",
    "settle_by_identity",
    "settle_inductors_choices",
    "undecided_note",
    "upper_bound_note",
]
