"""Absolute token positions -> physical KV-cache slots (the PagedAttention layout).

``slot(pos) = block_ids[pos // block_size] * block_size + pos % block_size``.
This is where slots are made, on the host, from Python ints; so this is where
their values are checked (the commit op itself checks metadata only, to stay
free of device syncs). Every bad input is a ``ValueError`` that names the
argument, because a wrong slot silently corrupts another request's cache:
non-integers (floats, bools) are refused rather than truncated, block ids must be
non-negative, distinct and small enough that ``block_id * block_size`` fits in
int64, and (with ``num_slots=``) inside the pool.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

INT64_MAX = 2**63 - 1
_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32)


def check_int(value: object, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an ``int``; a float, a bool or ``None`` is a ``ValueError``, never truncated."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if isinstance(value, torch.Tensor) and (value.dim() != 0 or value.device.type != "cpu"):
        raise ValueError(
            f"{name} must be a Python int (or a 0-d CPU tensor), got a tensor of shape {tuple(value.shape)}"
        )
    try:
        result = operator.index(value)  # type: ignore[arg-type]  # an int-like: its TypeError is the check
    except TypeError as err:  # e.g. a float tensor
        raise ValueError(f"{name} must be an int, got {value!r}") from err
    if minimum is not None and result < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {result}")
    return result


def _check_block_size(block_size: int) -> int:
    return check_int(block_size, "block_size", minimum=1)


def check_block_range(lo: int, hi: int, block_size: int, num_slots: int | None, name: str) -> None:
    """Blocks ``lo..hi`` (min, max) address valid, int64-representable slots."""
    if lo < 0:
        raise ValueError(f"{name} must be non-negative, got block id {lo}")
    if hi > (INT64_MAX - (block_size - 1)) // block_size:
        raise ValueError(f"{name} has block id {hi}: block_id * block_size ({block_size}) overflows int64")
    if num_slots is not None and (hi + 1) * block_size > num_slots:
        raise ValueError(
            f"{name} has block id {hi}, whose slots reach {(hi + 1) * block_size - 1}, outside the pool's "
            f"{num_slots} slots"
        )


def as_block_table(values: torch.Tensor | Sequence[int], name: str) -> torch.Tensor:
    """A 1-D integer table as ``torch.long`` on its own device (lists: on the CPU). No value checks."""
    if isinstance(values, torch.Tensor):
        if values.dtype not in _INT_DTYPES:
            raise ValueError(f"{name} must hold integers (int8..int64), got dtype {values.dtype}")
        if values.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        return values.long()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a sequence of ints or a 1-D integer tensor, got {type(values).__name__}")
    items = [check_int(v, f"{name}[{i}]") for i, v in enumerate(values)]
    if any(v > INT64_MAX or v < -INT64_MAX - 1 for v in items):
        raise ValueError(f"{name} has a value outside int64: {max(items, key=abs)}")
    return torch.tensor(items, dtype=torch.long)


def _check_distinct(blocks: torch.Tensor, name: str) -> None:
    if blocks.numel() > 1 and torch.unique(blocks).numel() != blocks.numel():
        raise ValueError(f"{name} holds a real block twice: two positions would share one slot")


def compute_slot_mapping(
    block_ids: Sequence[int] | torch.Tensor,
    positions: torch.Tensor | Sequence[int],
    block_size: int,
    *,
    num_slots: int | None = None,
) -> torch.Tensor:
    """Map absolute token positions to physical slots (host side, ``torch.long`` on the CPU).

    Args:
        block_ids: physical block id per block index (the request's block table).
        positions: absolute token positions (1-D, each ``>= 0`` and inside the table).
        block_size: tokens per block.
        num_slots: if given, every addressed slot must be ``< num_slots`` (the pool).
    """
    block_size = _check_block_size(block_size)
    if num_slots is not None:
        num_slots = check_int(num_slots, "num_slots", minimum=0)
    table = as_block_table(block_ids, "block_ids").cpu()
    pos = as_block_table(positions, "positions").cpu()
    if pos.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    lo_t, hi_t = torch.aminmax(pos)
    lo, hi = int(lo_t), int(hi_t)
    if lo < 0:
        raise ValueError(f"positions must be non-negative, got min {lo}")
    capacity = table.numel() * block_size
    if hi >= capacity:
        raise ValueError(
            f"positions reach {hi} but the block table of {table.numel()} blocks x block_size {block_size} "
            f"holds only positions < {capacity}"
        )
    block_index = torch.div(pos, block_size, rounding_mode="floor")
    used = table[torch.unique(block_index)]
    used_lo, used_hi = torch.aminmax(used)
    check_block_range(int(used_lo), int(used_hi), block_size, num_slots, "block_ids")
    _check_distinct(used, "block_ids")
    return table[block_index] * block_size + pos % block_size


def chunk_slot_mapping(
    block_ids: Sequence[int] | torch.Tensor,
    num_computed_tokens: int,
    chunk_size: int,
    block_size: int,
    *,
    num_slots: int | None = None,
) -> torch.Tensor:
    """Slots of the in-flight chunk, positions ``[num_computed_tokens, +chunk_size)``.

    This is the commit write target of one sequence; its slots are distinct and in
    range, which is what lets ``paged_write`` skip those checks.
    """
    num_computed_tokens = check_int(num_computed_tokens, "num_computed_tokens", minimum=0)
    chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    block_size = _check_block_size(block_size)
    table = as_block_table(block_ids, "block_ids")
    num_blocks = table.numel()
    if num_computed_tokens + chunk_size > num_blocks * block_size:
        raise ValueError(
            f"chunk [num_computed_tokens={num_computed_tokens}, +chunk_size={chunk_size}) runs past the "
            f"block table of {num_blocks} blocks x block_size {block_size}: allocate the chunk's blocks first"
        )
    positions = torch.arange(num_computed_tokens, num_computed_tokens + chunk_size, dtype=torch.long)
    return compute_slot_mapping(table, positions, block_size, num_slots=num_slots)


def resident_block_ids(block_ids: Sequence[int] | torch.Tensor, null_block_id: int) -> list[int]:
    """Real (non-null) blocks of a table, in table order: what the read path gathers."""
    null_block_id = check_int(null_block_id, "null_block_id", minimum=0)
    table = as_block_table(block_ids, "block_ids").cpu()
    resident = table[table != null_block_id]
    if resident.numel():
        lo, _hi = torch.aminmax(resident)
        if int(lo) < 0:
            raise ValueError(f"block_ids must be non-negative, got block id {int(lo)}")
    _check_distinct(resident, "block_ids")
    return resident.tolist()
