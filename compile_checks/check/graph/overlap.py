"""Whether two strided views of one storage share an element: by elements (strides), not by byte span.

Two views can interleave without sharing a byte: FlashInfer's ``(num_blocks, 2, block_size, H, D)``
cache gives ``k = kv[:, 0]`` and ``v = kv[:, 1]``, each a run of ``block_size * H * D`` elements every
``2 * block_size * H * D``; ``x[:, :4]`` and ``x[:, 4:]`` of an ``(N, 8)`` tensor likewise. Their byte
spans overlap, their elements do not.

The decision (:func:`views_overlap`) works in bytes (so views of different dtypes compare too): each
view becomes an offset, its dimensions outermost first (size-1 and stride-0 dimensions dropped,
dimensions that tile each other merged) and the length of its innermost contiguous run. Two views
whose outermost dimensions have one stride ``S`` that each one's inner extent fits in are compared
slab by slab: only slab pairs at most two apart can meet, and for each such pair the inner patterns
are compared the same way; an outer stride ``m`` times the other's splits the finer view into ``m``
views of the coarser stride first. A single run against a view is walked down that view's dimensions.
That is exact for every layout whose outer strides agree or nest (the interleaved and split-column cases
above, every other block of one, any view against a contiguous range); anything else (strides that do
not nest, slabs that overlap themselves) is answered "overlap" whenever the byte spans meet:
conservative, never a missed overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from compile_checks.check.graph.geometry import TensorGeometry

# recursion guard: a view has at most a few dozen dimensions; beyond this the answer is the conservative one
_MAX_DEPTH = 64
# outer strides that nest (one a multiple m of the other) are compared as m views of the larger stride
_MAX_SPLIT = 64


@dataclass(frozen=True)
class _Pattern:
    """A view in bytes: ``dims`` (size, stride) outermost first, each run ``run`` bytes long."""

    offset: int
    dims: tuple[tuple[int, int], ...]
    run: int

    def inner_extent(self, skip: int = 1) -> int:
        """Bytes one index of the outer ``skip`` dimensions spans: the rest of the dims plus the run."""
        return sum((n - 1) * s for n, s in self.dims[skip:]) + self.run

    @property
    def hi(self) -> int:
        return self.offset + self.inner_extent(0)


def _pattern(geo: TensorGeometry) -> _Pattern | None:
    """``geo`` in bytes; None when it holds no element."""
    if geo.numel == 0:
        return None
    size = geo.dtype.itemsize
    dims = sorted(((n, st * size) for n, st in zip(geo.shape, geo.stride) if n > 1 and st != 0), key=lambda d: -d[1])
    merged: list[tuple[int, int]] = []
    for n, s in dims:
        if merged and merged[-1][1] == n * s:  # the outer dim steps exactly over this one: one longer dim
            outer_n, _ = merged.pop()
            merged.append((outer_n * n, s))
        else:
            merged.append((n, s))
    run = size
    if merged and merged[-1][1] == size:  # the innermost dim is contiguous: one run
        run = merged.pop()[0] * size
    return _Pattern(geo.storage_offset * size, tuple(merged), run)


def _run_hits(lo: int, hi: int, p: _Pattern, depth: int) -> bool:
    """Whether the byte range ``[lo, hi)`` meets a byte of ``p``."""
    if hi <= p.offset or p.hi <= lo:
        return False
    if not p.dims:
        return True
    (n, stride), inner = p.dims[0], p.inner_extent()
    if inner > stride or depth > _MAX_DEPTH:
        return True  # slabs that overlap one another: conservative
    # slab j covers [offset + j*stride, offset + j*stride + inner): those meeting [lo, hi)
    first = max(0, (lo - p.offset - inner) // stride + 1)
    last = min(n - 1, (hi - 1 - p.offset) // stride)
    if last - first >= 2:
        return True  # a whole slab lies inside the range, and a slab holds at least one element
    rest = p.dims[1:]
    return any(
        _run_hits(lo, hi, _Pattern(p.offset + j * stride, rest, p.run), depth + 1) for j in range(first, last + 1)
    )


def _patterns_meet(a: _Pattern, b: _Pattern, depth: int = 0) -> bool:
    if b.hi <= a.offset or a.hi <= b.offset:
        return False
    if not a.dims:
        return _run_hits(a.offset, a.hi, b, depth)
    if not b.dims:
        return _run_hits(b.offset, b.hi, a, depth)
    (na, sa), (nb, sb) = a.dims[0], b.dims[0]
    ia, ib = a.inner_extent(), b.inner_extent()
    if ia > sa or ib > sb or depth > _MAX_DEPTH:
        return True  # self-overlapping slabs: conservative
    if sa != sb:
        if sa < sb:
            a, b, (na, sa), (nb, sb), ia, ib = b, a, (nb, sb), (na, sa), ib, ia
        if sa % sb or sa // sb > _MAX_SPLIT:
            return True  # outer strides that do not nest: conservative
        # b's slabs j = q * m + r (m = sa / sb) as m views whose outer stride is sa, each compared exactly
        m = sa // sb
        return any(
            _patterns_meet(a, _Pattern(b.offset + r * sb, (((nb - r + m - 1) // m, sa), *b.dims[1:]), b.run), depth + 1)
            for r in range(min(m, nb))
        )
    d = b.offset - a.offset
    # a's slab i and b's slab j meet only if k = i - j puts b's slab within (-ib, ia) of a's
    k_min, k_max = (d - ia) // sa + 1, -((-(d + ib)) // sa) - 1
    inner_a = _Pattern(0, a.dims[1:], a.run)
    for k in range(k_min, k_max + 1):
        if -(nb - 1) <= k <= na - 1 and _patterns_meet(inner_a, _Pattern(d - k * sa, b.dims[1:], b.run), depth + 1):
            return True
    return False


def views_overlap(a: TensorGeometry, b: TensorGeometry) -> bool:
    """Whether views ``a`` and ``b`` of one storage share a byte (exact for equal outer strides, else conservative)."""
    pa, pb = _pattern(a), _pattern(b)
    if pa is None or pb is None:
        return False  # an empty view owns no bytes
    return _patterns_meet(pa, pb)


def contains(outer: TensorGeometry, view: TensorGeometry) -> bool:
    """``view``'s byte span lies inside ``outer``'s and the two share an element (a view *of* ``outer``)."""
    po, pv = _pattern(outer), _pattern(view)
    if po is None or pv is None:
        return False
    return po.offset <= pv.offset and pv.hi <= po.hi and _patterns_meet(po, pv)


__all__ = ["contains", "views_overlap"]
