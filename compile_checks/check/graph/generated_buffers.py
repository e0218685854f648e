"""The buffers a full compile's generated code allocates, to settle what the post-grad graph cannot.

Whether a view scatter read only through sub-views gets a buffer of its own is Inductor's lowering
choice (:attr:`CloneSite.buffer_is_inductors_choice`). A full compile's wrapper code says: each buffer
is ``bufN = empty_strided_<device>((shape), (stride), torch.<dtype>)``, or ``bufN = bufM; del bufM  #
reuse`` (Inductor reuses a dead buffer only for one of the same size: a new buffer's worth of bytes).
The analysis-only mode has no such code: there the site stays, an upper bound.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import torch

from compile_checks.check.graph.sites import CloneSite

# the Python wrapper's allocation (CPU / CUDA / XPU ...); dims are ints, or sizes like s0 when symbolic
_ALLOC = re.compile(r"^\s*(\w+) = empty_strided_\w+\(\(([^)]*)\), \([^)]*\), (?:device=[^,]+, )?torch\.(\w+)\)", re.M)
_REUSE = re.compile(r"^\s*(\w+) = (\w+); del \2  # reuse", re.M)


def allocated_bytes(code: str) -> Counter[int | None] | None:
    """How many buffers of each byte size the code allocates or reuses (``None``: a symbolic size).

    None when the code is not a Python wrapper we can read (no allocation and no ``def call``).
    """
    if "def call(" not in code:
        return None
    sizes: dict[str, int | None] = {}
    for name, shape, dtype in _ALLOC.findall(code):
        dims = [d.strip() for d in shape.split(",") if d.strip()]
        item = getattr(torch, dtype, None)
        if item is None or not isinstance(item, torch.dtype) or not all(d.isdigit() for d in dims):
            sizes[name] = None
        else:
            sizes[name] = math.prod(int(d) for d in dims) * item.itemsize
    counts: Counter[int | None] = Counter(sizes.values())
    for _new, old in _REUSE.findall(code):
        counts[sizes.get(old)] += 1
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
    for site in sites:
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
    return kept, notes


def upper_bound_note(site: CloneSite) -> str:
    """What analysis-only (or a scan of a trace without output code) says of a site that is Inductor's choice."""
    return (
        f"{site.clone_node}: {site.op} into {site.placeholder} is read only through sub-views besides its write-back: "
        "Inductor may compute it inside its readers with no buffer, so it is counted as a copy (an upper bound); "
        "a full compile (--full) settles it from the generated code"
    )


def _nbytes(site: CloneSite) -> int | None:
    try:
        return int(site.clone.nbytes)
    except (TypeError, ValueError):
        return None


__all__ = ["allocated_bytes", "settle_inductors_choices", "upper_bound_note"]
