"""Positions in a pool's own terms: element offsets to coordinates, per-dim checksums, and how to name them.

Apart because the eager reference names what differs for any layout (``[B, H, L, D]`` where the
written dim is L, ``[blocks, block_size, H, D]``, a 0-dim counter) the same way it finds it: element
storage offsets are turned into coordinates of the pool, and the message names, per dim that does not
span its whole size, the indices concerned.

:func:`dim_checksums` is how a pool's changes are found without a copy of it: one checksum per index
of each dim (a hash of each element's bytes summed over the other dims), computed in chunks on the
pool's device. Extra memory: the sum of the pool's dims, plus one chunk of int64 work (4 MiB on the
CPU, 128 MiB on an accelerator).
"""

from __future__ import annotations

import torch

_CHUNK = 1 << 19  # elements hashed at once on the CPU (int64 work: 4 MiB)
_DEVICE_CHUNK = 1 << 24  # on an accelerator (128 MiB of int64 work: few kernel launches for a 40 GB pool)
_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _as_nd(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(1) if t.dim() == 0 else t


def _hash(x: torch.Tensor) -> torch.Tensor:
    """A mixed int64 per element of ``x``'s bytes (in place on one temporary: no cancellation by design)."""
    h = x.contiguous().view(_INT[x.element_size()]).to(torch.int64, copy=True)  # never the pool itself
    h.mul_(-7046029254386353131).add_(0x5BD1E995)
    h.bitwise_xor_(h >> 29)
    return h.mul_(-4658895280553007687)


def _sums(h: torch.Tensor) -> list[torch.Tensor]:
    """Per dim, the sum over every other dim: two passes over ``h`` whatever its rank."""
    if h.dim() == 1:
        return [h]
    inner = _sums(h.sum(dim=-1))  # every dim but the last, from a tensor 1/size(-1) as large
    return [*inner, h.sum(dim=list(range(h.dim() - 1)))]


def dim_checksums(pool: torch.Tensor) -> list[torch.Tensor]:
    """Per dim d of ``pool``: a checksum per index of d over the pool's bytes (int64, on its device)."""
    t = _as_nd(pool.detach())
    sums = [torch.zeros(n, dtype=torch.int64, device=t.device) for n in t.shape]
    if t.numel() == 0:
        return sums
    chunk = _CHUNK if t.device.type == "cpu" else _DEVICE_CHUNK
    if t[0].numel() > chunk:  # one index of dim 0 is too large a chunk: go one dim down
        for i in range(t.shape[0]):
            below = dim_checksums(t[i])
            sums[0][i] = below[0].sum()
            for d, sub in enumerate(below, start=1):
                sums[d] += sub
        return sums
    rows = max(1, chunk // max(1, t[0].numel()))
    for start in range(0, t.shape[0], rows):
        part = _sums(_hash(t[start : start + rows]))
        sums[0][start : start + part[0].shape[0]] += part[0]
        for d in range(1, t.dim()):
            sums[d] += part[d]
    return sums


def changed_indices(before: list[torch.Tensor], after: list[torch.Tensor]) -> list[list[int]]:
    """Per dim, the indices whose checksum changed."""
    return [(a != b).nonzero().flatten().tolist() for a, b in zip(before, after, strict=True)]


def flat_view(pool: torch.Tensor) -> torch.Tensor:
    """Every element of ``pool``'s storage as a 1-d view (gather and scatter by storage offset)."""
    n = pool.untyped_storage().nbytes() // pool.element_size()
    return pool.detach().as_strided((n,), (1,), 0)


def coordinates(pool: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(coords [n, ndim], inside [n])``: each storage offset as a coordinate of ``pool``, and whether it is
    one of the pool's elements (an offset of another view of the same storage is not)."""
    t = _as_nd(pool)
    rest = offsets - t.storage_offset()
    coords = torch.zeros(offsets.numel(), t.dim(), dtype=torch.long, device=offsets.device)
    inside = rest >= 0
    strides = t.stride()
    for d in sorted(range(t.dim()), key=lambda i: -strides[i]):
        stride = max(1, strides[d])
        c = rest.div(stride, rounding_mode="floor") if t.shape[d] > 1 else torch.zeros_like(rest)
        inside &= (c >= 0) & (c < t.shape[d])
        coords[:, d] = c
        rest = rest - c * strides[d]
    return coords, inside & (rest == 0)


def inside_mask(pool: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Whether each storage offset is one of ``pool``'s elements."""
    return coordinates(pool, offsets)[1]


def index_runs(ix: list[int], limit: int = 6) -> str:
    """Sorted indices as runs (``0-3, 7, 9-12``), the first ``limit`` of them (``...`` when there are more)."""
    runs: list[tuple[int, int]] = []
    for i in ix:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:limit])
    return text + (", ..." if len(runs) > limit else "")


def _ranges(ix: list[int], limit: int = 6) -> str:
    return f"[{index_runs(ix, limit)}]"


def written_dim(shape: tuple[int, ...], per_dim: list[list[int]]) -> int:
    """The dim positions are counted along: the first whose indices do not span it (else 0)."""
    for d, ix in enumerate(per_dim):
        if len(ix) < shape[d]:
            return d
    return 0


def describe(shape: tuple[int, ...], per_dim: list[list[int]]) -> str:
    """``dim 2 [4-7] of [1, 2, 16, 4]``: the indices of each dim that does not span its whole size."""
    if not shape:
        return "the 0-dim tensor"
    parts = [f"dim {d} {_ranges(ix)}" for d, ix in enumerate(per_dim) if len(ix) < shape[d]]
    where = ", ".join(parts) if parts else "every element"
    return f"{where} of {list(shape)}"


def per_dim(coords: torch.Tensor) -> list[list[int]]:
    """The distinct indices of each dim among the coordinates ``[n, ndim]``."""
    return [torch.unique(coords[:, d]).tolist() for d in range(coords.shape[1])]


__all__ = [
    "changed_indices",
    "coordinates",
    "describe",
    "dim_checksums",
    "flat_view",
    "inside_mask",
    "per_dim",
    "written_dim",
]
