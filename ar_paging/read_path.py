"""The read path: a request's resident window, gathered from the pools in position order.

Resident = the attention-sink chunks plus the in-window chunks; evicted positions
sit on vLLM's shared ``null_block`` and are never read. The host computes the
slots once per chunk (``resident_window``); the compiled step gathers with
``gather_window`` (an ``index_select`` per pool).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ar_paging.slot_mapping import _as_long_1d, _check_block_size


@dataclass(frozen=True)
class ResidentWindow:
    """Slots and absolute positions of the resident tokens, in position order."""

    slots: torch.Tensor  # (num_resident_tokens,) long
    positions: torch.Tensor  # (num_resident_tokens,) long

    def __len__(self) -> int:
        return int(self.slots.numel())


def resident_window(
    block_ids: Sequence[int] | torch.Tensor,
    num_tokens: int,
    block_size: int,
    null_block_id: int,
) -> ResidentWindow:
    """Slots of every token in ``[0, num_tokens)`` whose block is not the null block."""
    _check_block_size(block_size)
    table = _as_long_1d(block_ids, "block_ids")
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be non-negative, got {num_tokens}")
    if num_tokens > table.numel() * block_size:
        raise ValueError(
            f"num_tokens {num_tokens} exceeds the block table's {table.numel()} blocks x {block_size}"
        )
    positions = torch.arange(num_tokens, dtype=torch.long)
    blocks = table[torch.div(positions, block_size, rounding_mode="floor")] if num_tokens else table[:0]
    keep = blocks != null_block_id
    positions = positions[keep]
    slots = blocks[keep] * block_size + positions % block_size
    return ResidentWindow(slots=slots, positions=positions)


def gather_window(
    k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """K/V of ``slots`` from flat pools: ``(num_tokens, num_kv_heads, head_dim)`` each."""
    if slots.dtype != torch.long or slots.dim() != 1:
        raise ValueError(f"slots must be a 1-D torch.long tensor, got {slots.dtype} {tuple(slots.shape)}")
    return k_pool.index_select(0, slots), v_pool.index_select(0, slots)


def read_window(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_ids: Sequence[int] | torch.Tensor,
    num_tokens: int,
    block_size: int,
    null_block_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(k, v, positions)`` of a request's resident window, ready for attention."""
    window = resident_window(block_ids, num_tokens, block_size, null_block_id)
    if window.slots.numel() and int(window.slots.max()) >= k_pool.shape[0]:
        raise ValueError(
            f"block table addresses slot {int(window.slots.max())} outside the pool's {k_pool.shape[0]} slots"
        )
    slots = window.slots.to(k_pool.device)
    k, v = gather_window(k_pool, v_pool, slots)
    return k, v, window.positions
