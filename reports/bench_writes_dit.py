"""The write check's cost on a realistic DiT stack: one point of ``python -m reports.bench_writes``.

A causal DiT block as AR video engines run it (hidden ``--hidden``, ``hidden // 64`` heads of 64, a 4x MLP,
``--tokens`` tokens per chunk): each call commits the chunk's K/V into the block's paged pools
``[num_blocks, 16, heads, 64]`` (``index_copy_`` at the chunk's slots) and attends over the window's slots.
One step function is compiled once for every block (the weights are inputs), and the driver runs
``CHUNKS`` chunks of ``STEPS`` denoising steps through ``--blocks`` blocks.

No Inductor (its compile would swamp the numbers): dynamo captures the step, and the "compiled artifact" is
the captured graph itself. Two rollouts are timed in interleaved rounds: plain (dynamo, no check) and
checked (the per-call write check's wrapper around each call: the captured graph run eagerly under the undo
log, rolled back, the artifact run, the written elements compared). ``write_check`` = checked - plain, as a
multiple of the plain rollout (an eager rollout: the artifact is the eager graph). Memory: the process's
peak RSS after the checked rollouts minus the peak after the plain ones (its pools allocated up front), at
the given pool size: run twice with ``--pool-chunks`` apart to see whether it is flat in the pools' size.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

CHUNKS, STEPS, BLOCK, HEAD_DIM = 2, 2, 16, 64


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def dit_step(
    x: torch.Tensor,
    w: list[torch.Tensor],
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    slots: torch.Tensor,
    window: torch.Tensor,
) -> torch.Tensor:
    """One DiT block on one chunk: QKV, commit K/V at ``slots``, attend over ``window`` slots, MLP."""
    wqkv, wo, w1, w2 = w
    tokens, hidden = x.shape
    heads = hidden // HEAD_DIM
    h = F.layer_norm(x, (hidden,))
    q, k, v = (h @ wqkv).split(hidden, dim=-1)
    k_pool.flatten(0, 1).index_copy_(0, slots, k.view(tokens, heads, HEAD_DIM))
    v_pool.flatten(0, 1).index_copy_(0, slots, v.view(tokens, heads, HEAD_DIM))
    keys = k_pool.flatten(0, 1).index_select(0, window).transpose(0, 1)
    values = v_pool.flatten(0, 1).index_select(0, window).transpose(0, 1)
    att = F.scaled_dot_product_attention(q.view(tokens, heads, HEAD_DIM).transpose(0, 1), keys, values)
    x = x + att.transpose(0, 1).reshape(tokens, hidden) @ wo
    return x + F.gelu(F.layer_norm(x, (hidden,)) @ w1) @ w2


def dit_point(blocks: int, repeats: int, hidden: int, tokens: int, pool_chunks: int) -> dict[str, Any]:
    """Seconds and peak memory of a plain and a checked rollout of ``blocks`` DiT blocks."""
    from compile_checks.check.writes.calls import CallWriteCheck, eager_copy

    torch.manual_seed(0)
    heads = hidden // HEAD_DIM
    scale = hidden**-0.5
    weights = [
        [torch.randn(hidden, n) * scale for n in (3 * hidden,)]
        + [torch.randn(hidden, hidden) * scale, torch.randn(hidden, 4 * hidden) * scale]
        + [torch.randn(4 * hidden, hidden) * (4 * hidden) ** -0.5]
        for _ in range(blocks)
    ]
    pool_blocks = max(pool_chunks, CHUNKS) * tokens // BLOCK
    pools = {}
    for b in range(blocks):
        for kv in "kv":
            pools[f"block{b}.{kv}"] = torch.zeros(pool_blocks, BLOCK, heads, HEAD_DIM)
    chunk_slots = [torch.arange(c * tokens, (c + 1) * tokens) for c in range(CHUNKS)]
    windows = [torch.arange(0, (c + 1) * tokens) for c in range(CHUNKS)]
    noise = torch.randn(tokens, hidden)
    pool_bytes = sum(p.numel() * p.element_size() for p in pools.values())

    def rollout(step: Callable[..., torch.Tensor]) -> None:
        with torch.no_grad():
            for c in range(CHUNKS):
                for _ in range(STEPS):
                    x = noise
                    for b in range(blocks):
                        x = step(x, weights[b], pools[f"block{b}.k"], pools[f"block{b}.v"], chunk_slots[c], windows[c])

    check = CallWriteCheck(lambda: pools)

    def plain_backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return gm.forward

    def checked_backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return check.wrap(0, eager_copy(gm), gm.forward)

    torch._dynamo.reset()
    plain = torch.compile(dit_step, backend=plain_backend, dynamic=False)
    checked = torch.compile(dit_step, backend=checked_backend, dynamic=False)
    rollout(plain)  # warm-up: dynamo's capture, out of the timed rounds
    before = _rss()
    rollout(checked)
    extra = _rss() - before  # the checked rollout's peak beyond the plain one's
    rounds = []
    for _ in range(repeats):
        times = {}
        for name, step in (("plain", plain), ("checked", checked)):
            t0 = time.perf_counter()
            rollout(step)
            times[name] = time.perf_counter() - t0
        rounds.append(times)
    findings = check.findings()
    if findings or check.errors:
        raise RuntimeError(f"the checked rollout was not clean: {[f.message for f in findings] + check.errors}")
    plain_s = statistics.median(r["plain"] for r in rounds)
    checked_s = statistics.median(r["checked"] for r in rounds)
    ratio = statistics.median((r["checked"] - r["plain"]) / r["plain"] for r in rounds)
    return {
        "kind": "dit",
        "blocks": blocks,
        "hidden": hidden,
        "tokens": tokens,
        "calls": blocks * CHUNKS * STEPS,
        "pools": len(pools),
        "pool_bytes": pool_bytes,
        "eager_rollout_s": plain_s,
        "checked_rollout_s": checked_s,
        "write_check_s": checked_s - plain_s,
        "write_check_over_eager": ratio,  # the median of the per-round ratios
        "extra_peak_bytes": extra,
        "extra_peak_x_pools": extra / pool_bytes,
        "peak_saved_bytes": check.peak_saved_bytes,
    }


__all__ = ["dit_point", "dit_step"]
