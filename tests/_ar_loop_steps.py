"""AR-loop engine steps for the issue-16 tests, and the generated-code truth they are held to.

Each bug shape comes with its clean twin. Truth is the code Inductor generates for the same
function compiled with plain ``torch.compile`` (no check, caches off): a pool copy there is a
buffer at least one pool big that the compiled module allocates (``empty_strided_cpu``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from _checks import pool_sized_allocations
from torch._inductor.utils import run_and_get_code

import ar_paging

H, D = 2, 8
N = 64
POOL_BYTES = N * H * D * 4


def pools_split(n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    """Random (not zero) pools: a copy taken from the wrong place changes the result."""
    return torch.randn(n, H, D), torch.randn(n, H, D)


def step_args(n: int = N, tokens: int = 4) -> tuple[torch.Tensor, ...]:
    """(x, slots, window, evicted): commit the last ``tokens`` slots, read 0..7, evict 8..11."""
    return torch.randn(tokens, H, D), torch.arange(n - tokens, n), torch.arange(0, 8), torch.arange(8, 12)


# ---- item 1: evict, gather the window, commit, in one region ----------------------------------
def evict_gather_commit_late(k, v, x, slots, window, evicted):
    """Evict (re-inplaced ``index_put_``), gather, commit with ``paged_write``; the V window is
    read only after the write, so V is cloned (and copied back) around the commit."""
    k[evicted] = 0
    v[evicted] = 0
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2, x + kw.mean(0), slots)
    return kw.sum() + vw.sum()


def evict_gather_commit(k, v, x, slots, window, evicted):
    """Clean twin: both window reads feed the write, nothing can be sunk below it."""
    k[evicted] = 0
    v[evicted] = 0
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2 + vw.mean(0), x + kw.mean(0), slots)
    return kw.sum() + vw.sum()


def gather_commit_late(k, v, x, slots, window, evicted):
    """No eviction: gather, commit, the V window read after the write (V cloned)."""
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2, x + kw.mean(0), slots)
    return kw.sum() + vw.sum() + evicted.sum()


def evict_gather_aten_commit(k, v, x, slots, window, evicted):
    """The same loop with an ATen commit: K's window is read after its ``index_put``."""
    k[evicted] = 0
    v[evicted] = 0
    kw, vw = k[window], v[window]
    k[slots] = x * 2 + vw.mean(0)
    v[slots] = x + kw.mean(0)
    return kw.sum() + vw.sum()


def evict_aten_commit(k, v, x, slots, window, evicted):
    """Clean twin: evict and commit with ATen writes, no window read after the commit."""
    k[evicted] = 0
    v[evicted] = 0
    k[slots] = x * 2
    v[slots] = x + window.sum()
    return x.sum()


def op_then_aten_commit_read_before(k, v, x, slots, window, evicted):
    """``paged_write`` then an ATen commit into the same K pool, K's window read before both."""
    kw = k[window]
    torch.ops.ar_paging.paged_write(k, v, x, x, slots)
    k[evicted] = x + 1
    return kw.sum() + k[window].sum() * 0


def op_then_aten_commit(k, v, x, slots, window, evicted):
    """Clean twin: the same writes, K's window read after both of them."""
    torch.ops.ar_paging.paged_write(k, v, x, x, slots)
    k[evicted] = x + 1
    return k[window].sum()


# ---- truth: Inductor's generated code -----------------------------------------------------------
def generated_copies(
    fn: Callable[..., Any],
    run: Callable[[Callable[..., Any]], Any],
    functionalization: str,
    pool_bytes: int = POOL_BYTES,
) -> list[int]:
    """Pool-sized buffers in the code plain ``torch.compile`` generates for ``fn`` (sorted bytes)."""
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    with inductor_config.patch(force_disable_caches=True, enable_auto_functionalized_v2=functionalization == "v2"):
        compiled = torch.compile(fn)
        _, codes = run_and_get_code(run, compiled)
    torch._dynamo.reset()
    return sorted(b for code in codes for b in pool_sized_allocations(code, pool_bytes))


def reported_copies(report: Any) -> list[int]:
    """Bytes of each distinct copy node the check reports (one per buffer the code allocates)."""
    return sorted({(c.region, c.node): c.nbytes for c in report.clones + report.other_clones}.values())


# ---- item 5: counts and bytes -------------------------------------------------------------------
def fused_kv_late_read(kv, x, slots, window):
    """One ``(2, N, H, D)`` input, k and v sliced inside, V window read after the commit: under v2
    one clone of the shared base stands in for both arguments (one buffer in the code)."""
    k, v = kv[0], kv[1]
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2, x + kw.mean(0), slots)
    return kw.sum() + vw.sum()


def fused_kv_unbind(kv, x, slots, window):
    """``k, v = kv.unbind(0)`` (vLLM's idiom), the commit with no later read."""
    k, v = kv.unbind(0)
    torch.ops.ar_paging.paged_write(k, v, x * 2, x + 1, slots)
    return x.sum()


def fused_kv_chunk_late_read(kv, x, slots, window):
    """``kv.chunk(2)`` views, V window read after the commit."""
    k, v = (t.squeeze(0) for t in kv.chunk(2))
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2, x + kw.mean(0), slots)
    return kw.sum() + vw.sum()


def two_kept_index_puts(k, v, x, slots, window, evicted):
    """Two ATen writes into K, each followed by a read of the old K: both stay functional."""
    kw = k[window]
    k[slots] = x
    kw2 = k[window]
    k[evicted] = x + 1
    return kw.sum() + kw2.sum()


def range_commit_after_gather(k, v, x, slots, window, evicted):
    """``k[a:b] = x`` with the old K read after: Inductor writes it in one read-modify-write pass."""
    kw = k[window]
    k[N - x.shape[0] :] = x
    return kw.sum()


def fused_args(n: int = N, tokens: int = 4) -> tuple[torch.Tensor, ...]:
    """(kv, x, slots, window) for the fused steps."""
    return torch.randn(2, n, H, D), torch.randn(tokens, H, D), torch.arange(n - tokens, n), torch.arange(0, 8)
