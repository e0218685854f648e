"""The commit write: a chunk's K/V into pool slots, as a mutating custom op.

``torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slot_mapping)``
declares ``k_pool`` and ``v_pool`` mutated (``Tensor(a0!)``, ``Tensor(a1!)``), so
under torch.compile it is functionalized into ``auto_functionalized_v2`` and
Inductor's reinplace pass must turn it back into an in-place write (what
``compile_checks`` verifies).

Shapes:
    k_pool, v_pool: flat pools ``(num_slots, num_kv_heads, head_dim)``.
    new_k, new_v:   ``(batch, chunk_size, num_kv_heads, head_dim)`` or
                    ``(num_tokens, num_kv_heads, head_dim)``.
    slot_mapping:   ``torch.long``; ``(batch, chunk_size)`` (each sequence its own
                    slots) or ``(chunk_size,)`` when ``batch == 1`` / 3-D K/V.

Hot path (it runs once per layer per committed chunk, inside compiled regions and
CUDA graphs): every check here reads metadata only, with no device-to-host sync
and no data-dependent shape. Slot values (range, duplicates) are checked where
they are made, on the host (``ar_paging.slot_mapping``), and here only in the
opt-in debug mode (``ar_paging.set_debug_checks(True)`` / ``AR_PAGING_DEBUG=1``).
Every check runs before anything is written.

Registered like vLLM's ``direct_register_custom_op`` (``torch.library.Library``
definition + one implementation + a fake), not ``torch.library.custom_op``: the
latter's Python dispatch layers cost tens of microseconds per call (measured by
``python -m reports.bench_hotpath``).

Two kernels, one schema: for CPU tensors the C++ kernel of ``csrc/paged_write.cpp``
(built on first use, ``ar_paging.native``; no dispatcher-to-Python trampoline, the
same checks and messages in C++), for every other device (CUDA included) and when
the C++ kernel is off or cannot be built, ``_paged_write_impl`` below.
``ar_paging.paged_write_kernel()`` says which one serves CPU tensors.
"""

from __future__ import annotations

import torch

from ar_paging import lowering as _lowering
from ar_paging import native as _native
from ar_paging.debug_checks import add_debug_checks_listener, debug_checks_enabled
from ar_paging.overlap import byte_span, spans_overlap, tensors_overlap

SCHEMA = "paged_write(Tensor(a0!) k_pool, Tensor(a1!) v_pool, Tensor new_k, Tensor new_v, Tensor slot_mapping) -> ()"


def _check_shapes(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Metadata-only validation, shared by the real and the fake implementation.

    Mirrored in ``csrc/paged_write.cpp`` (``check_shapes``) with the same order and messages: change both.
    """
    k_shape = k_pool.shape
    if len(k_shape) != 3:
        raise ValueError(f"k_pool must be a flat pool (num_slots, num_kv_heads, head_dim), got shape {tuple(k_shape)}")
    if v_pool.shape != k_shape:
        raise ValueError(f"v_pool shape {tuple(v_pool.shape)} != k_pool shape {tuple(k_shape)}")
    dtype, device = k_pool.dtype, k_pool.device
    if v_pool.dtype != dtype or v_pool.device != device:
        raise ValueError(f"v_pool ({v_pool.dtype}, {v_pool.device}) must match k_pool ({dtype}, {device})")
    head_shape = k_shape[1:]
    for name, t in (("new_k", new_k), ("new_v", new_v)):
        if t.dim() not in (3, 4) or t.shape[-2:] != head_shape:
            raise ValueError(
                f"{name} must be (batch, chunk_size, {head_shape[0]}, {head_shape[1]}) or "
                f"(num_tokens, {head_shape[0]}, {head_shape[1]}) to match the pool, got {tuple(t.shape)}"
            )
        if t.dtype != dtype:
            raise ValueError(f"{name} dtype {t.dtype} != pool dtype {dtype}")
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but the pool is on {device}")
    if new_v.shape != new_k.shape:
        raise ValueError(f"new_v shape {tuple(new_v.shape)} != new_k shape {tuple(new_k.shape)}")
    if slot_mapping.dtype != torch.long:
        raise ValueError(f"slot_mapping must be torch.long (int64), got {slot_mapping.dtype}")
    if slot_mapping.device != device:
        raise ValueError(f"slot_mapping is on {slot_mapping.device} but the pool is on {device}")
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


def _common_case_ok(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> bool:
    """The usual, valid call in ~1 us: same shapes/dtypes/devices, 3-D tokens + 1-D slots or 4-D + 2-D.

    ``False`` only means "not the common case": ``_check_shapes`` then decides (and names the argument).
    """
    ks, nks, sm = k_pool.shape, new_k.shape, slot_mapping.shape
    n = len(nks)
    dtype, device = k_pool.dtype, k_pool.device
    return (
        len(ks) == 3
        and v_pool.shape == ks
        and new_v.shape == nks
        and nks[n - 1] == ks[2]
        and nks[n - 2] == ks[1]
        and (
            (n == 3 and len(sm) == 1 and sm[0] == nks[0])
            or (n == 4 and len(sm) == 2 and sm[0] == nks[0] and sm[1] == nks[1])
        )
        and v_pool.dtype is dtype
        and new_k.dtype is dtype
        and new_v.dtype is dtype
        and slot_mapping.dtype is torch.long
        and v_pool.device == device
        and new_k.device == device
        and new_v.device == device
        and slot_mapping.device == device
    )


def _check_no_aliasing(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """No input may share bytes with a pool being written (metadata only, real tensors only).

    ``index_copy_`` from a source that overlaps its destination, or K and V in one
    region, silently writes the wrong values. Byte spans first (one comparison per
    pair); only intersecting spans go to the exact, stride-aware ``tensors_overlap``.
    Mirrored in ``csrc/paged_write.cpp`` (``check_no_aliasing``).
    """
    k_span, v_span = byte_span(k_pool), byte_span(v_pool)
    if spans_overlap(k_span, v_span) and tensors_overlap(k_pool, v_pool):
        raise ValueError("k_pool and v_pool overlap in memory: K and V must be two separate regions")
    for name, t in (("new_k", new_k), ("new_v", new_v), ("slot_mapping", slot_mapping)):
        span = byte_span(t)
        if spans_overlap(span, k_span) and tensors_overlap(t, k_pool):
            pool_name = "k_pool"
        elif spans_overlap(span, v_span) and tensors_overlap(t, v_pool):
            pool_name = "v_pool"
        else:
            continue
        raise ValueError(
            f"{name} overlaps {pool_name} in memory: the write would read slots it has already "
            f"overwritten; pass a copy ({name}.clone())"
        )


def _check_slot_values(slots: torch.Tensor, num_slots: int) -> None:
    """Debug mode only: range and uniqueness of the slots (three syncs). Mirrored in ``csrc/paged_write.cpp``."""
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


def _paged_write_impl(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write ``new_k`` / ``new_v`` into ``k_pool`` / ``v_pool`` at ``slot_mapping`` (in place)."""
    if not _common_case_ok(k_pool, v_pool, new_k, new_v, slot_mapping):
        _check_shapes(k_pool, v_pool, new_k, new_v, slot_mapping)
    _check_no_aliasing(k_pool, v_pool, new_k, new_v, slot_mapping)
    # Views cost ~1 us each on this path: take them only when the layout needs one.
    slots = slot_mapping if slot_mapping.dim() == 1 else slot_mapping.reshape(-1)
    if new_k.dim() == 4:
        new_k, new_v = new_k.flatten(0, 1), new_v.flatten(0, 1)
    if debug_checks_enabled():
        _check_slot_values(slots, k_pool.shape[0])
    k_pool.index_copy_(0, slots, new_k)
    v_pool.index_copy_(0, slots, new_v)


def _paged_write_fake(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    _check_shapes(k_pool, v_pool, new_k, new_v, slot_mapping)
    _lowering.ensure_registered()  # traced here before any Inductor lowering: see ar_paging.lowering


_LIB = torch.library.Library("ar_paging", "FRAGMENT")  # kept alive: dropping it unregisters the op
_LIB.define(SCHEMA, tags=(torch.Tag.pt2_compliant_tag,))
_LIB.impl("paged_write", _paged_write_impl, "CompositeExplicitAutograd")
torch.library.register_fake("ar_paging::paged_write", _paged_write_fake, lib=_LIB)

# The C++ CPU kernel (ar_paging/csrc/paged_write.cpp), registered for the CPU key over the Python one
# above, which stays the kernel of every other device (CUDA included). AR_PAGING_NATIVE: see ar_paging.native.
NATIVE, NATIVE_UNAVAILABLE_BECAUSE = _native.load_per_environment()
if NATIVE:
    add_debug_checks_listener(torch.ops.ar_paging_native.set_debug_checks)


def kernel() -> str:
    """``"native"`` when the C++ kernel serves CPU tensors, else ``"python"`` (``NATIVE_UNAVAILABLE_BECAUSE``)."""
    return "native" if NATIVE else "python"


paged_write = torch.ops.ar_paging.paged_write


def pool_write_chunk(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Commit a chunk's K/V (after its last denoising step) through the custom op."""
    torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slot_mapping)
