"""Engine steps shared by the soundness tests (and the before/after measurements).

Each step comes as a pair: one where a pool-sized copy survives (or the check is blind)
and its clean twin, so every check has a negative control.
"""

from __future__ import annotations

import torch

import ar_paging

H, D = 2, 8


def pools_split(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(n, H, D), torch.zeros(n, H, D)


def pools_fused(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    kv = torch.zeros(2, n, H, D)
    return kv[0], kv[1]


def chunk(tokens: int = 4) -> torch.Tensor:
    return torch.randn(tokens, H, D)


# ---- item 1: commits written with plain ATen ops -------------------------------------------
def aten_commit_after_gather(k, v, new_k, new_v, slots, window):
    """The usual step shape: gather the window, then commit with ``index_put_``.

    ``reorder_for_locality`` sinks the gathers below the writes, so the old pools are still
    read after the write and reinplacing must keep ``index_put`` functional: a pool copy each.
    """
    kw, vw = k[window], v[window]
    k[slots] = new_k
    v[slots] = new_v
    return kw.sum() + vw.sum()


def aten_commit_only(k, v, new_k, new_v, slots, window):
    """The same write with no later read of the pools: re-inplaced, no copy."""
    k[slots] = new_k
    v[slots] = new_v
    return new_k.sum() + window.sum()


def aten_slice_copy_after_gather(k, v, new_k, new_v, slots, window):
    """``copy_`` into a slice (``slice_scatter`` once functional), old pool read afterwards."""
    kw = k[window]
    k[: new_k.shape[0]].copy_(new_k)
    return kw.sum() + new_v.sum() + v.sum() * 0


# ---- custom-op steps ------------------------------------------------------------------------
def op_commit_after_gather(k, v, x, slots, window):
    """Both window reads feed the write: no pass can sink them below it (clean when split)."""
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2 + vw.mean(0), x + kw.mean(0), slots)
    return kw.sum() + vw.sum()


def op_commit_late_read(k, v, x, slots, window):
    """The V window is consumed only after the write: its gather is sunk below it, V is cloned."""
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2, x + kw.mean(0), slots)
    return kw.sum() + vw.sum()


def op_commit_graph_break(k, v, x, slots, window):
    """``op_commit_after_gather`` followed by a graph break and a second region."""
    out = op_commit_after_gather(k, v, x, slots, window)
    torch._dynamo.graph_break()
    return out + k[window].sum()


# ---- item 5: the user's own copies ------------------------------------------------------------
def users_own_copies_then_commit(k, v, x, slots):
    """``kc, vc = k.clone(), v.clone(); op(kc, vc); op(k, v)``: the two copies are the user's."""
    kc, vc = k.clone(), v.clone()
    torch.ops.ar_paging.paged_write(kc, vc, x, x, slots)
    torch.ops.ar_paging.paged_write(k, v, x, x, slots)
    return kc.sum() + vc.sum()


def commit_args(n: int = 64, tokens: int = 4) -> tuple[torch.Tensor, ...]:
    """(x, slots, window) for the custom-op steps."""
    return chunk(tokens), torch.arange(n - tokens, n), torch.arange(0, 8)


def aten_args(n: int = 64, tokens: int = 4) -> tuple[torch.Tensor, ...]:
    """(new_k, new_v, slots, window) for the ATen steps."""
    return chunk(tokens), chunk(tokens), torch.arange(n - tokens, n), torch.arange(0, 8)
