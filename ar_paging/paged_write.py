"""The commit write: a chunk's K/V into pool slots, as a mutating custom op.

``torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slot_mapping)``
declares ``mutates_args=("k_pool", "v_pool")``, so under torch.compile it is
functionalized into ``auto_functionalized_v2`` and Inductor's reinplace pass must
turn it back into an in-place write (what ``compile_checks`` verifies).

Shapes:
    k_pool, v_pool: flat pools ``(num_slots, num_kv_heads, head_dim)``.
    new_k, new_v:   ``(batch, chunk_size, num_kv_heads, head_dim)`` or
                    ``(num_tokens, num_kv_heads, head_dim)``.
    slot_mapping:   ``torch.long``; ``(batch, chunk_size)`` (each sequence its own
                    slots) or ``(chunk_size,)`` when ``batch == 1`` / 3-D K/V.
The spec wrote only batch index 0 and dropped the rest; here every sequence is
written, and a 1-D mapping with ``batch > 1`` is a ``ValueError``. Slots must lie in
``[0, num_slots)`` and be distinct; every check runs before anything is written.
"""

from __future__ import annotations

import torch

_OP_NAME = "ar_paging::paged_write"


def _check_shapes(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Metadata-only validation, shared by the real and the fake implementation."""
    if k_pool.dim() != 3:
        raise ValueError(
            f"k_pool must be a flat pool (num_slots, num_kv_heads, head_dim), got shape {tuple(k_pool.shape)}"
        )
    if v_pool.shape != k_pool.shape:
        raise ValueError(f"v_pool shape {tuple(v_pool.shape)} != k_pool shape {tuple(k_pool.shape)}")
    if v_pool.dtype != k_pool.dtype or v_pool.device != k_pool.device:
        raise ValueError(
            f"v_pool ({v_pool.dtype}, {v_pool.device}) must match k_pool ({k_pool.dtype}, {k_pool.device})"
        )
    head_shape = tuple(k_pool.shape[1:])
    for name, t in (("new_k", new_k), ("new_v", new_v)):
        if t.dim() not in (3, 4) or tuple(t.shape[-2:]) != head_shape:
            raise ValueError(
                f"{name} must be (batch, chunk_size, {head_shape[0]}, {head_shape[1]}) or "
                f"(num_tokens, {head_shape[0]}, {head_shape[1]}) to match the pool, got {tuple(t.shape)}"
            )
        if t.dtype != k_pool.dtype:
            raise ValueError(f"{name} dtype {t.dtype} != pool dtype {k_pool.dtype}")
        if t.device != k_pool.device:
            raise ValueError(f"{name} is on {t.device} but the pool is on {k_pool.device}")
    if new_v.shape != new_k.shape:
        raise ValueError(f"new_v shape {tuple(new_v.shape)} != new_k shape {tuple(new_k.shape)}")
    if slot_mapping.dtype != torch.long:
        raise ValueError(f"slot_mapping must be torch.long (int64), got {slot_mapping.dtype}")
    if slot_mapping.device != k_pool.device:
        raise ValueError(f"slot_mapping is on {slot_mapping.device} but the pool is on {k_pool.device}")
    tokens_shape = tuple(new_k.shape[:-2])
    if slot_mapping.dim() == 1 and len(tokens_shape) == 2 and tokens_shape[0] != 1:
        raise ValueError(
            f"slot_mapping is 1-D {tuple(slot_mapping.shape)} but new_k has batch {tokens_shape[0]}: "
            f"pass a (batch, chunk_size) slot_mapping, one row of slots per sequence"
        )
    expected = tokens_shape if slot_mapping.dim() != 1 else (tokens_shape[-1],)
    if tuple(slot_mapping.shape) != expected:
        raise ValueError(
            f"slot_mapping shape {tuple(slot_mapping.shape)} does not match new_k tokens {tokens_shape} "
            f"(expected {expected})"
        )


def _check_slot_range(slots: torch.Tensor, num_slots: int) -> None:
    if slots.numel() == 0:
        return
    lo, hi = int(slots.min()), int(slots.max())
    if lo < 0 or hi >= num_slots:
        raise ValueError(f"slot_mapping has slots in [{lo}, {hi}] outside the pool's [0, {num_slots})")
    if torch.unique(slots).numel() != slots.numel():
        raise ValueError(
            "slot_mapping has duplicate slots: two tokens (or two sequences) would write one slot, "
            "and which one lands is unspecified"
        )


@torch.library.custom_op(_OP_NAME, mutates_args=("k_pool", "v_pool"))
def paged_write(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write ``new_k`` / ``new_v`` into ``k_pool`` / ``v_pool`` at ``slot_mapping`` (in place)."""
    _check_shapes(k_pool, v_pool, new_k, new_v, slot_mapping)
    slots = slot_mapping.reshape(-1)
    _check_slot_range(slots, k_pool.shape[0])
    head_shape = k_pool.shape[1:]
    k_pool.index_copy_(0, slots, new_k.reshape(-1, *head_shape))
    v_pool.index_copy_(0, slots, new_v.reshape(-1, *head_shape))


@paged_write.register_fake
def _paged_write_fake(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    _check_shapes(k_pool, v_pool, new_k, new_v, slot_mapping)


def pool_write_chunk(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Commit a chunk's K/V (after its last denoising step) through the custom op."""
    torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slot_mapping)
