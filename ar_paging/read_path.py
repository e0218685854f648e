"""The read path: a request's resident window, gathered from the pools in position order.

Resident = the attention-sink chunks plus the in-window chunks; evicted positions
sit on vLLM's shared ``null_block`` and are never read. The host computes the
slots once per chunk (``resident_window``); the compiled step gathers with
``gather_window`` (an ``index_select`` per pool).

``resident_window`` works on the block table's own device and expands each
resident block to ``block * block_size + arange(block_size)``: its cost is
O(table length + resident tokens), independent of how much history was evicted,
and a table already on the pool's device is never copied host-to-device. It
synchronises twice: once for the number of resident blocks (data), once for
all the value checks on those blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ar_paging.debug_checks import debug_checks_enabled
from ar_paging.slot_mapping import as_block_table, check_block_range, check_int


@dataclass(frozen=True)
class ResidentWindow:
    """Slots and absolute positions of the resident tokens, in position order (table's device)."""

    slots: torch.Tensor  # (num_resident_tokens,) long
    positions: torch.Tensor  # (num_resident_tokens,) long

    def __len__(self) -> int:
        return int(self.slots.numel())


def resident_window(
    block_ids: Sequence[int] | torch.Tensor,
    num_tokens: int,
    block_size: int,
    null_block_id: int,
    *,
    num_slots: int | None = None,
) -> ResidentWindow:
    """Slots of every token in ``[0, num_tokens)`` whose block is not the null block.

    ``block_ids`` may be a list or a 1-D integer tensor (the result stays on its
    device). Resident blocks must be non-negative, distinct, int64-addressable and,
    with ``num_slots=``, inside the pool; otherwise ``ValueError`` naming ``block_ids``.
    """
    block_size = check_int(block_size, "block_size", minimum=1)
    num_tokens = check_int(num_tokens, "num_tokens", minimum=0)
    null_block_id = check_int(null_block_id, "null_block_id", minimum=0)
    if num_slots is not None:
        num_slots = check_int(num_slots, "num_slots", minimum=0)
    table = as_block_table(block_ids, "block_ids")
    if num_tokens > table.numel() * block_size:
        raise ValueError(f"num_tokens {num_tokens} exceeds the block table's {table.numel()} blocks x {block_size}")
    num_blocks = -(-num_tokens // block_size)
    blocks = table[:num_blocks]
    # nonzero syncs once (its size is data); everything after is O(resident blocks).
    block_index = torch.nonzero(blocks != null_block_id).squeeze(1)
    resident = blocks[block_index]
    if resident.numel() == 0:
        empty = table.new_empty(0)
        return ResidentWindow(slots=empty, positions=empty)
    # One more sync for every value check: range, duplicates, and whether the last block is resident.
    lo, hi = torch.aminmax(resident)
    ordered = resident.sort().values
    has_dup = (ordered[1:] == ordered[:-1]).any()
    lo, hi, dup, last = torch.stack([lo, hi, has_dup.long(), block_index[-1]]).tolist()
    check_block_range(lo, hi, block_size, num_slots, "block_ids")
    if dup:
        raise ValueError("block_ids holds a real block twice: two positions would read one slot")
    offsets = torch.arange(block_size, device=blocks.device)
    slots = (resident.unsqueeze(1) * block_size + offsets).reshape(-1)
    positions = (block_index.unsqueeze(1) * block_size + offsets).reshape(-1)
    overhang = num_blocks * block_size - num_tokens  # the last block may be partly ahead of num_tokens
    if last == num_blocks - 1 and overhang:
        slots, positions = slots[:-overhang], positions[:-overhang]
    return ResidentWindow(slots=slots, positions=positions)


def gather_window(k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K/V of ``slots`` from flat pools: ``(num_tokens, num_kv_heads, head_dim)`` each.

    ``slots`` must already be on the pools' device (no implicit copy). Slot values
    are range-checked only in debug mode (it syncs); ``resident_window(num_slots=)``
    checks them where they are made.
    """
    if slots.dtype != torch.long or slots.dim() != 1:
        raise ValueError(f"slots must be a 1-D torch.long tensor, got {slots.dtype} {tuple(slots.shape)}")
    if slots.device != k_pool.device:
        raise ValueError(
            f"slots are on {slots.device} but the pool is on {k_pool.device}: build them there "
            f"(resident_window on a table that lives on the pool's device)"
        )
    if debug_checks_enabled() and slots.numel():
        lo, hi = torch.aminmax(slots)
        if int(lo) < 0 or int(hi) >= k_pool.shape[0]:
            raise ValueError(f"slots in [{int(lo)}, {int(hi)}] outside the pool's [0, {k_pool.shape[0]})")
    return k_pool.index_select(0, slots), v_pool.index_select(0, slots)


def read_window(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_ids: Sequence[int] | torch.Tensor,
    num_tokens: int,
    block_size: int,
    null_block_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(k, v, positions)`` of a request's resident window, ready for attention.

    A table on the pool's device is used in place; a list (or a table elsewhere)
    is moved once, as a table, never as per-token slots.
    """
    table = as_block_table(block_ids, "block_ids")
    if table.device != k_pool.device:
        table = table.to(k_pool.device)
    window = resident_window(table, num_tokens, block_size, null_block_id, num_slots=k_pool.shape[0])
    k, v = gather_window(k_pool, v_pool, window.slots)
    return k, v, window.positions
