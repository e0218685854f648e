"""Per-row (dim 0) checksums of a pool's raw bits, computed on the pool's device: O(rows) memory.

Apart because the write watcher needs to know which rows an op changed without keeping a copy of
the pool: two checksums per row, before and after the call, are compared instead of the bytes.

Each row's elements are read as integers of their own width (``Tensor.view`` to ``int8`` / ``int16`` /
``int32`` / ``int64``, no copy), so NaN, ``-0.0`` and any payload hash like any other bits (a NaN
rewritten with the same bits is no change; a pool may start as garbage). Two weighted sums modulo
2**64 per row, with independent odd weights per column: a one-element change never cancels (an odd
weight is invertible modulo 2**64), and a multi-element change cancels only if it does in both
sums. The sums are taken over tiles of :data:`TILE_ELEMENTS` elements (1/1024 of a larger tensor, up
to :data:`MAX_TILE_ELEMENTS`; a strided pool is read tile by tile, never reshaped whole), so the
temporaries stay a small bounded fraction of the pool whatever its size.
"""

from __future__ import annotations

import torch

# elements per tile: at least TILE_ELEMENTS (the int64 temporaries of a tile, a few of 8 MiB each), at
# most MAX_TILE_ELEMENTS, else 1/1024 of the tensor (a large pool on a GPU: fewer, larger kernel launches)
TILE_ELEMENTS = 1 << 20
MAX_TILE_ELEMENTS = 1 << 25
# two weightings: w = (column * MUL + ADD) | 1 (int64 arithmetic wraps modulo 2**64)
_WEIGHTS = ((-7046029254386353131, 0x632BE59BD9B4E019), (-4658895280553007687, 0x3C6EF372FE94F82B))

_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as signed integers of the same width (a view, no copy)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        return t.view(torch.uint8).view(torch.int8)
    return t.view(_INT_OF_SIZE[t.element_size()])


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as (rows, columns) without a copy where its strides allow, else its 3+-d form for per-row tiles."""
    if t.dim() == 0:
        return t.reshape(1, 1)
    if t.dim() == 1:
        return t.unsqueeze(1)
    try:
        return t.view(t.shape[0], -1)
    except RuntimeError:  # strides that cannot be flattened: read row by row (each row's own view)
        return t


def _weights(start: int, stop: int, device: torch.device) -> list[torch.Tensor]:
    cols = torch.arange(start, stop, dtype=torch.int64, device=device)
    return [(cols * mul + add) | 1 for mul, add in _WEIGHTS]


def _tile_sums(tile: torch.Tensor, start: int) -> torch.Tensor:
    """(rows of the tile, 2) weighted sums of a 2-d integer tile whose columns start at ``start``."""
    wide = tile.to(torch.int64)
    return torch.stack([(wide * w).sum(dim=1) for w in _weights(start, start + tile.shape[1], tile.device)], dim=1)


def _tile(numel: int) -> int:
    return max(TILE_ELEMENTS, min(MAX_TILE_ELEMENTS, numel // 1024))


def _flat_sums(x: torch.Tensor, start: int, tile: int) -> torch.Tensor:
    """(2,) weighted sums of all of ``x``'s elements in row-major order, columns numbered from ``start``.

    A block whose strides cannot be flattened is split along its dim 0 (never copied whole).
    """
    try:
        flat = x.view(1, -1)
    except RuntimeError:
        flat = None
    total = torch.zeros(2, dtype=torch.int64, device=x.device)
    if flat is None:
        step = x[0].numel()
        for i in range(x.shape[0]):
            total += _flat_sums(x[i], start + i * step, tile)
        return total
    for c0 in range(0, flat.shape[1], tile):
        total += _tile_sums(flat[:, c0 : c0 + tile], start + c0)[0]
    return total


def row_checksums(t: torch.Tensor) -> torch.Tensor:
    """``(rows, 2)`` int64 checksums of ``t``'s rows along dim 0 (a 0-d tensor is one row), on ``t``'s device."""
    bits = _bits(t.detach())
    view = _rows(bits)
    rows = view.shape[0]
    out = torch.zeros(rows, 2, dtype=torch.int64, device=t.device)
    if bits.numel() == 0:
        return out
    tile = _tile(bits.numel())
    with torch.no_grad():
        if view.dim() > 2:  # strides that cannot be flattened: row by row, each in viewable blocks
            for r in range(rows):
                out[r] = _flat_sums(view[r], 0, tile)
            return out
        cols = view.shape[1]
        col_tile = max(1, min(cols, tile))
        row_tile = max(1, tile // col_tile)
        for r0 in range(0, rows, row_tile):
            r1 = min(rows, r0 + row_tile)
            for c0 in range(0, cols, col_tile):
                out[r0:r1] += _tile_sums(view[r0:r1, c0 : c0 + col_tile], c0)
    return out


def changed_rows_of(before: torch.Tensor, after: torch.Tensor) -> list[int]:
    """Rows whose checksums differ (``before``/``after``: :func:`row_checksums` of one pool)."""
    if before.shape != after.shape:
        return list(range(max(before.shape[0], after.shape[0])))
    return (before != after).any(dim=1).nonzero().flatten().tolist()


__all__ = ["MAX_TILE_ELEMENTS", "TILE_ELEMENTS", "changed_rows_of", "row_checksums"]
