"""The warm-cache reproducer as gate targets: one step, ``paged_write(k, v, ...)`` then window reads.

``fused``: K and V are ``kv[0]`` / ``kv[1]`` of one ``(2, ...)`` allocation (a negative control: cold, Inductor
clones the shared storage); ``split``: two allocations (the fix; cold, clean); ``other``: split with half the
slots (another graph: no cache warmed by the other two serves it); ``grown``: fused, driven with pools of 48, 56
and 64 slots (48 compiles with static sizes, 56 recompiles with symbolic ones, 64 reuses that graph);
``window``: the read-window-then-slice-write pattern with static sizes (3 chunks of a 12-token cache: three
graphs, each with copies analysis-only cannot settle). Small: 64 slots x 2 heads x 64.
"""

from __future__ import annotations

import torch

from ar_paging import paged_write
from compile_checks import Case

SLOTS, HEADS, HEAD_DIM = 64, 2, 64


def step(
    k: torch.Tensor, v: torch.Tensor, new_k: torch.Tensor, new_v: torch.Tensor, slots: torch.Tensor, win: torch.Tensor
):  # type: ignore[no-untyped-def]
    paged_write(k, v, new_k, new_v, slots)
    return (k[win] * v[win]).sum(-1)


def _case(name: str, fused_kv: bool, slots: int = SLOTS) -> Case:
    if fused_kv:
        kv = torch.zeros(2, slots, HEADS, HEAD_DIM)
        k, v = kv[0], kv[1]
    else:
        k, v = torch.zeros(slots, HEADS, HEAD_DIM), torch.zeros(slots, HEADS, HEAD_DIM)
    g = torch.Generator().manual_seed(0)
    new = torch.randn(2, 4, HEADS, HEAD_DIM, generator=g)
    args = (k, v, new[0], new[1], torch.tensor([3, 5, 7, 9]), torch.tensor([3, 5, 7, 9, 11]))
    return Case(name, step, args=args, pools={"k": k, "v": v}, expect_clean=not fused_kv, fullgraph=True)


def split() -> Case:
    return _case("split", fused_kv=False)


def fused() -> Case:
    return _case("fused", fused_kv=True)


def other() -> Case:
    return _case("other", fused_kv=False, slots=SLOTS // 2)


GROWN_SLOTS = (48, 56, 64)


def grown() -> Case:
    kvs = {n: torch.zeros(2, n, HEADS, HEAD_DIM) for n in GROWN_SLOTS}
    pools = {"k": kvs[GROWN_SLOTS[0]][0], "v": kvs[GROWN_SLOTS[0]][1]}
    g = torch.Generator().manual_seed(0)
    new = torch.randn(2, 4, HEADS, HEAD_DIM, generator=g)
    slots, win = torch.tensor([3, 5, 7, 9]), torch.tensor([3, 5, 7, 9, 11])

    def driver(compiled):  # type: ignore[no-untyped-def]
        out = []
        for n in GROWN_SLOTS:
            pools.update(k=kvs[n][0], v=kvs[n][1])
            out.append(compiled(kvs[n][0], kvs[n][1], new[0], new[1], slots, win))
        return out

    return Case(
        "grown", step, pools=lambda: dict(pools), driver=driver, expect_clean=False, fullgraph=True, check_writes=False
    )


WINDOW_TOKENS, WINDOW_CHUNK = 12, 4


def window_step(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, start: int, end: int):  # type: ignore[no-untyped-def]
    """Read the window, slice-write the new chunk, then use the old window beside the new one."""
    old_k, old_v = k[:, :end] * 1, v[:, :end] * 1
    k[:, start:end] = x
    v[:, start:end] = x * 2
    return old_k + k[:, :end], old_v + v[:, :end]


def window() -> Case:
    """The window pattern, static sizes: 3 chunks of a 12-token cache (one graph per chunk)."""
    k, v = torch.zeros(1, WINDOW_TOKENS, HEADS, 8), torch.zeros(1, WINDOW_TOKENS, HEADS, 8)
    x = torch.randn(3, 1, WINDOW_CHUNK, HEADS, 8, generator=torch.Generator().manual_seed(0))

    def driver(compiled):  # type: ignore[no-untyped-def]
        return [compiled(k, v, x[i], i * WINDOW_CHUNK, (i + 1) * WINDOW_CHUNK) for i in range(3)]

    return Case("window", window_step, pools={"k": k, "v": v}, driver=driver, fullgraph=True, dynamic=False)
