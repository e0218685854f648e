"""Do two tensors share memory? A metadata-only answer (no kernel, no sync).

``paged_write`` must refuse a K pool that is also the V pool, or a chunk that is a
view of the pool it is written into: ``index_copy_`` would then read what it has
just written (K ends up holding V). ``torch._C._overlaps`` cannot be used: it
answers "same storage", so ``kv[0]`` and ``kv[1]`` of one ``(2, ...)`` allocation,
which occupy disjoint bytes and are a legal (if clone-prone) pool layout, would be
refused. Here the answer is computed from each tensor's byte span and, when the
spans intersect without both being dense, from the exact element addresses.
"""

from __future__ import annotations

import torch


def byte_span(t: torch.Tensor) -> tuple[int, int]:
    """``[first, last)`` byte addresses ``t`` may touch; an empty range for an empty tensor."""
    start = t.data_ptr()
    if t.is_contiguous():  # the common case, and the cheapest (no stride walk)
        return start, start + t.nbytes
    if t.numel() == 0:
        return start, start
    # torch strides are non-negative: the furthest element is at sum((n - 1) * stride).
    extent = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return start, start + (extent + 1) * t.element_size()


def _is_dense(t: torch.Tensor) -> bool:
    """Every byte of the span belongs to exactly one element (a permuted contiguous layout)."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted((s, n) for n, s in zip(t.shape, t.stride()) if n != 1):
        if stride != expected:  # a gap (stride too big) or self-overlap (stride 0 / too small)
            return False
        expected *= size
    return True


def _element_byte_ranges(t: torch.Tensor, base: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted ``[start, end)`` byte offsets (from ``base``) of every element of ``t``."""
    itemsize = t.element_size()
    first = (t.data_ptr() - base) // itemsize
    extent = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    # Element indices laid out exactly like t: as_strided over an arange of the span.
    index = torch.arange(first, first + extent + 1, dtype=torch.long).as_strided(t.shape, t.stride())
    starts = torch.unique(index.reshape(-1)) * itemsize + (t.data_ptr() - base) % itemsize
    return starts, starts + itemsize


def spans_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Two non-empty byte ranges intersect."""
    return a[0] < b[1] and b[0] < a[1] and a[0] < a[1] and b[0] < b[1]


def tensors_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when some byte belongs to an element of ``a`` and to an element of ``b``."""
    span_a, span_b = byte_span(a), byte_span(b)
    if not spans_overlap(span_a, span_b) or a.device != b.device:
        return False
    if _is_dense(a) and _is_dense(b):
        return True
    # Rare: intersecting spans with gaps (interleaved strided views). Exact, O(numel) on the host.
    base = min(span_a[0], span_b[0])
    a_start, a_end = _element_byte_ranges(a, base)
    b_start, b_end = _element_byte_ranges(b, base)
    # Each b element: the last a element starting before its end must end after its start.
    idx = torch.searchsorted(a_start, b_end, right=False) - 1
    valid = idx >= 0
    return bool((a_end[idx.clamp(min=0)] > b_start)[valid].any())
