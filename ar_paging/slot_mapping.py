"""Absolute token positions -> physical KV-cache slots (the PagedAttention layout).

``slot(pos) = block_ids[pos // block_size] * block_size + pos % block_size``.
Pure functions on the host-side block table; every bad input is a ``ValueError``
that names the argument, because a wrong slot silently corrupts another
request's cache.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch


def _check_block_size(block_size: int) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise ValueError(f"block_size must be an int, got {type(block_size).__name__}")
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")


def _as_long_1d(values: torch.Tensor | Sequence[int], name: str) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
            raise ValueError(f"{name} must hold integers, got dtype {values.dtype}")
        t = values.to(device="cpu", dtype=torch.long)
    else:
        items = list(values)
        for v in items:
            if isinstance(v, bool) or not hasattr(v, "__index__"):
                raise ValueError(f"{name} must hold integers, got {v!r}")
        t = torch.as_tensor([operator.index(v) for v in items], dtype=torch.long)
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t


def compute_slot_mapping(
    block_ids: Sequence[int] | torch.Tensor,
    positions: torch.Tensor | Sequence[int],
    block_size: int,
) -> torch.Tensor:
    """Map absolute token positions to physical slots.

    Args:
        block_ids: physical block id per block index (the request's block table).
        positions: absolute token positions (1-D, each ``>= 0`` and inside the table).
        block_size: tokens per block.

    Returns:
        ``torch.long`` tensor of slots, one per position, on the CPU.
    """
    _check_block_size(block_size)
    table = _as_long_1d(block_ids, "block_ids")
    pos = _as_long_1d(positions, "positions")
    if pos.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    if int(pos.min()) < 0:
        raise ValueError(f"positions must be non-negative, got min {int(pos.min())}")
    capacity = table.numel() * block_size
    if int(pos.max()) >= capacity:
        raise ValueError(
            f"positions reach {int(pos.max())} but the block table of "
            f"{table.numel()} blocks x block_size {block_size} holds only positions "
            f"< {capacity}"
        )
    if table.numel() and int(table.min()) < 0:
        raise ValueError(f"block_ids must be non-negative, got min {int(table.min())}")
    block_index = torch.div(pos, block_size, rounding_mode="floor")
    return table[block_index] * block_size + pos % block_size


def chunk_slot_mapping(
    block_ids: Sequence[int] | torch.Tensor,
    num_computed_tokens: int,
    chunk_size: int,
    block_size: int,
) -> torch.Tensor:
    """Slots of the in-flight chunk, positions ``[num_computed_tokens, +chunk_size)``.

    This is the commit write target of one sequence.
    """
    if num_computed_tokens < 0:
        raise ValueError(f"num_computed_tokens must be non-negative, got {num_computed_tokens}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    _check_block_size(block_size)
    table = _as_long_1d(block_ids, "block_ids")
    num_blocks = table.numel()
    if num_computed_tokens + chunk_size > num_blocks * block_size:
        raise ValueError(
            f"chunk [num_computed_tokens={num_computed_tokens}, +chunk_size={chunk_size}) runs past the "
            f"block table of {num_blocks} blocks x block_size {block_size}: allocate the chunk's blocks first"
        )
    positions = torch.arange(num_computed_tokens, num_computed_tokens + chunk_size, dtype=torch.long)
    return compute_slot_mapping(table, positions, block_size)


def resident_block_ids(block_ids: Sequence[int] | torch.Tensor, null_block_id: int) -> list[int]:
    """Real (non-null) blocks of a table, in table order: what the read path gathers."""
    return [int(b) for b in _as_long_1d(block_ids, "block_ids").tolist() if int(b) != null_block_id]
