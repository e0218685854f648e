"""A user's own engine step for the report tests: window gather, attention, paged commit.

split: K and V in two allocations (clean); fused: two halves of one (negative control).
"""

import torch

from ar_paging import gather_window, pool_write_chunk
from compile_checks.case import Case

N, H, D, T, W = 64, 2, 8, 4, 8


def step(k_pool, v_pool, x, window_slots, slot_mapping):
    k, v = gather_window(k_pool, v_pool, window_slots)
    s = torch.einsum("thd,shd->hts", x, k).softmax(-1)
    out = torch.einsum("hts,shd->thd", s, v)
    pool_write_chunk(k_pool, v_pool, (x + out).unsqueeze(0), (x - out).unsqueeze(0), slot_mapping)
    return out


def _case(name, fused):
    if fused:
        kv = torch.zeros(2, N, H, D)
        k, v = kv[0], kv[1]
    else:
        k, v = torch.zeros(N, H, D), torch.zeros(N, H, D)
    x = torch.randn(T, H, D)
    ws = torch.arange(W)
    sm = torch.arange(W, W + T).unsqueeze(0)
    return Case(name=name, fn=step, args=(k, v, x, ws, sm), pools={"k": k, "v": v}, expect_clean=not fused)


def cases():
    """Fresh tensors on every load."""
    return [_case("my_split", False), _case("my_fused", True)]
