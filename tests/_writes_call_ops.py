"""Ops for the per-call write check's tests: writes the compiler drops (an undeclared op whose size-0
dummy nobody uses: AOT autograd's dead-code elimination drops it), through dtype views of a pool, with
negative indices, and an op that keeps Python state of its own.

Each ``hidden_*`` op writes the tensor in ``CONTEXT["pool"]`` with ``mutates_args=()`` and returns a
size-0 dummy: called without using the dummy, the compiled region never writes (a planted dropped write).
``kv_write`` declares writing both K and V (a paged write of a layer's two pools).
"""

from __future__ import annotations

import torch

CONTEXT: dict[str, torch.Tensor] = {}
COUNTER = {"next": 0}


def _dummy(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(0)


@torch.library.custom_op("w39_tests::hidden_fp8_write", mutates_args=())
def hidden_fp8_write(k: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    CONTEXT["pool"].view(torch.float8_e4m3fn)[rows] = k.to(torch.float8_e4m3fn)
    return _dummy(k)


@torch.library.custom_op("w39_tests::hidden_complex_write", mutates_args=())
def hidden_complex_write(k: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    torch.view_as_complex(CONTEXT["pool"]).index_copy_(0, rows, torch.view_as_complex(k))
    return _dummy(k)


@torch.library.custom_op("w39_tests::hidden_int32_write", mutates_args=())
def hidden_int32_write(k: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    CONTEXT["pool"].view(torch.int32).index_copy_(0, rows, k)
    return _dummy(k)


@torch.library.custom_op("w39_tests::hidden_fill", mutates_args=())
def hidden_fill(rows: torch.Tensor, value: float) -> torch.Tensor:
    CONTEXT["pool"].index_fill_(0, rows, value)
    return _dummy(rows)


@torch.library.custom_op("w39_tests::hidden_seq_write", mutates_args=())
def hidden_seq_write(k: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    CONTEXT["pool"].index_copy_(2, pos, k)
    return _dummy(k)


@torch.library.custom_op("w39_tests::counted_write", mutates_args=("pool",))
def counted_write(pool: torch.Tensor, k: torch.Tensor) -> None:
    """Writes row ``COUNTER["next"]`` and advances it: state outside the tensors it is given."""
    pool[COUNTER["next"]] = k
    COUNTER["next"] += 1


@torch.library.custom_op("w39_tests::kv_write", mutates_args=("k", "v"))
def kv_write(k: torch.Tensor, v: torch.Tensor, new_k: torch.Tensor, new_v: torch.Tensor, slots: torch.Tensor) -> None:
    k[slots] = new_k
    v[slots] = new_v


kv_write.register_fake(lambda k, v, new_k, new_v, slots: None)

for _op in (hidden_fp8_write, hidden_complex_write, hidden_int32_write, hidden_seq_write):
    _op.register_fake(lambda k, rows: _dummy(k))
hidden_fill.register_fake(lambda rows, value: _dummy(rows))


# --- steps: each a correct write and its dropped twin --------------------------------------------


def fp8_write(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """fp8 K stored as uint8: written through ``pool.view(torch.float8_e4m3fn)``."""
    pool.view(torch.float8_e4m3fn)[rows] = k.to(torch.float8_e4m3fn)  # index_put_ (no fp8 index_copy_ on CPU)
    return k * 2


def fp8_dropped(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    hidden_fp8_write(k, rows)
    return k * 2


def complex_write(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """A rotary-style cache written through ``view_as_complex`` (float pool ``[..., 2]``)."""
    torch.view_as_complex(pool).index_copy_(0, rows, torch.view_as_complex(k))
    return k * 2


def complex_dropped(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    hidden_complex_write(k, rows)
    return k * 2


def int32_write(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Packed values: a float32 pool written through an int32 view."""
    pool.view(torch.int32).index_copy_(0, rows, k)
    return k * 2


def int32_dropped(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    hidden_int32_write(k, rows)
    return k * 2


def negative_fill(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``index_fill_`` with negative indices (the last rows), valid PyTorch."""
    pool.index_fill_(0, rows, 3.0)
    return k * 2


def negative_fill_dropped(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    hidden_fill(rows, 3.0)
    return k * 2


def counted(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    counted_write(pool, k[0])
    return k * 2


@torch.library.custom_op("w39_tests::hidden_slot_write", mutates_args=())
def hidden_slot_write(k: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """A paged write ``[blocks, block_size, H, D]`` by flat slot (``block * block_size + offset``), undeclared."""
    CONTEXT["pool"].flatten(0, 1).index_copy_(0, slots, k)
    return _dummy(k)


hidden_slot_write.register_fake(lambda k, slots: _dummy(k))
