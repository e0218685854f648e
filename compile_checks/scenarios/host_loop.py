"""The host loop: vLLM block pool + chunk-window eviction + denoising, as a ``Case.driver``.

Each chunk of ``chunk_size`` latent tokens is denoised in ``denoise_steps`` steps; every
step runs ``num_layers / layers_per_region`` calls of the compiled region. Window slots
come from ``ar_paging.resident_window`` on the host, padded to a fixed capacity and
masked so shapes stay static. Only the last step of a chunk commits (for commit orders
that commit once): commit and non-commit steps are two graphs. Between chunks, eviction
runs on a real vLLM ``BlockPool`` through ``ChunkWindowManager`` (sink chunks kept, gap
chunks nulled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ar_paging import ChunkWindowSpec, chunk_slot_mapping, resident_window

if TYPE_CHECKING:
    from compile_checks.scenarios.model import Model
    from compile_checks.scenarios.spec import Scenario


class BlockTables:
    """One request per sequence on a real vLLM BlockPool, evicted by ChunkWindowManager."""

    def __init__(self, s: Scenario) -> None:
        from vllm.v1.core.block_pool import BlockPool
        from vllm.v1.core.single_type_kv_cache_manager import get_manager_for_kv_cache_spec

        spec = ChunkWindowSpec(
            block_size=s.block_size,
            num_kv_heads=s.num_kv_heads,
            head_size=s.head_dim,
            dtype=s.dtype,
            sliding_window=s.window_chunks * s.chunk_size,
            chunk_size=s.chunk_size,
            window_chunks=s.window_chunks,
            sink_chunks=s.sink_chunks,
        )
        self.pool = BlockPool(num_gpu_blocks=s.num_blocks, enable_caching=False, hash_block_size=s.block_size)
        self.manager = get_manager_for_kv_cache_spec(
            spec,
            max_in_flight_tokens=s.chunk_size * s.batch,
            max_model_len=s.num_chunks * s.chunk_size,
            block_pool=self.pool,
            enable_caching=False,
            kv_cache_group_id=0,
            scheduler_block_size=s.block_size,
        )
        self.s = s
        self.null_block_id = self.pool.null_block.block_id
        self.evicted = 0
        # block ids the last start_chunk nulled (evicted from the window), per sequence
        self.just_evicted: dict[int, list[int]] = {}

    def start_chunk(self, seq: int, num_computed: int) -> list[int]:
        """Evict what fell out of the window, allocate the in-flight chunk; the block table."""
        rid = f"seq{seq}"
        held = [b.block_id for b in self.manager.req_to_blocks.get(rid, [])]
        before = sum(b == self.null_block_id for b in held)
        self.manager.remove_skipped_blocks(rid, num_computed)
        total = num_computed + self.s.chunk_size
        self.manager.allocate_new_blocks(rid, total, total)
        blocks = [b.block_id for b in self.manager.req_to_blocks[rid]]
        self.just_evicted[seq] = [
            old for old, new in zip(held, blocks) if old != self.null_block_id and new == self.null_block_id
        ]
        self.evicted += sum(b == self.null_block_id for b in blocks) - before
        return blocks


@dataclass(frozen=True)
class ChunkInputs:
    win_slots: torch.Tensor  # (B, W) long, padded with slot 0 (the null block)
    win_bias: torch.Tensor  # (B, 1, 1, W + T) float32: 0 resident, -inf padding
    commit_slots: torch.Tensor  # (B, T) long
    resident_tokens: int  # real (unpadded) resident tokens, summed over the batch


def evict_slots(s: Scenario, evicted: list[list[int]]) -> torch.Tensor:
    """(B, chunk_size) slots of the just-evicted blocks, padded with slot 0 (the null block's)."""
    out = torch.zeros((s.batch, s.chunk_size), dtype=torch.long)
    for b, blocks in enumerate(evicted):
        slots = [blk * s.block_size + i for blk in blocks for i in range(s.block_size)][: s.chunk_size]
        out[b, : len(slots)] = torch.tensor(slots, dtype=torch.long)
    return out


def chunk_inputs(s: Scenario, tables: list[list[int]], num_computed: int, null_block_id: int) -> ChunkInputs:
    """Host-side slots for one chunk: the padded resident window and the commit slots."""
    cap, t = s.window_capacity, s.chunk_size
    win = torch.zeros((s.batch, cap), dtype=torch.long)
    bias = torch.zeros((s.batch, 1, 1, cap + t), dtype=torch.float32)
    commit = torch.empty((s.batch, t), dtype=torch.long)
    resident = 0
    for b, table in enumerate(tables):
        w = resident_window(table, num_computed, s.block_size, null_block_id)
        n = len(w)
        if n > cap:
            raise AssertionError(f"resident window of {n} tokens exceeds capacity {cap}")
        win[b, :n] = w.slots
        bias[b, 0, 0, n:cap] = float("-inf")
        commit[b] = chunk_slot_mapping(table, num_computed, t, s.block_size)
        resident += n
    return ChunkInputs(win, bias, commit, resident)


def initial_latents(s: Scenario, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((s.batch, s.chunk_size, s.hidden), generator=g).to(s.dtype) for _ in range(s.num_chunks)]


@dataclass
class RunStats:
    """What one run of the host loop did (the driver's output)."""

    num_steps: int = 0
    resident_tokens_read: int = 0  # summed over steps (per layer: multiply by num_layers)
    evicted_blocks: int = 0
    latents: list[torch.Tensor] = field(default_factory=list)


def run_loop(
    s: Scenario, model: Model, region: Callable[..., torch.Tensor], progress: Callable[[], None] | None = None
) -> RunStats:
    """Denoise every chunk; commit on its last step; evict between chunks."""
    tables = BlockTables(s)
    stats = RunStats()
    temb = torch.linspace(0.0, 1.0, s.hidden).to(s.dtype)
    for c, x in enumerate(initial_latents(s)):
        num_computed = c * s.chunk_size
        block_tables = [tables.start_chunk(b, num_computed) for b in range(s.batch)]
        ci = chunk_inputs(s, block_tables, num_computed, tables.null_block_id)
        evicted = evict_slots(s, [tables.just_evicted.get(b, []) for b in range(s.batch)])
        for step in range(s.denoise_steps):
            commit = step == s.denoise_steps - 1
            tau = 1.0 - step / s.denoise_steps
            h = x + tau * temb
            for r in range(s.num_regions_per_step):
                h = region(*model.region_args(r, h, ci.win_slots, ci.win_bias, ci.commit_slots, commit, evicted))
            x = x + (h - x) / s.denoise_steps
            stats.num_steps += 1
            stats.resident_tokens_read += ci.resident_tokens
            if progress is not None:
                progress()
        stats.latents.append(x)
    stats.evicted_blocks = tables.evicted
    return stats


def make_driver(
    s: Scenario, model: Model, progress: Callable[[], None] | None = None
) -> Callable[[Callable[..., torch.Tensor]], RunStats]:
    """``driver(compiled_region) -> RunStats``: the host loop over ``model``'s pools, under no_grad."""

    def driver(region: Callable[..., torch.Tensor]) -> RunStats:
        with torch.no_grad():
            return run_loop(s, model, region, progress)

    return driver


# relative to max |eager|; the denoising loop compounds rounding differences over steps and layers
TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def max_rel_diff(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """Largest |compiled - eager| relative to the eager tensor's scale (max |eager|, at least 1)."""
    return max(
        float((x.float() - y.float()).abs().max()) / max(1.0, float(y.float().abs().max())) for x, y in zip(a, b)
    )


def make_verify(
    s: Scenario, model: Model, eager: Callable[[], tuple[Model, RunStats]]
) -> Callable[[RunStats], tuple[bool, float]]:
    """``verify(stats) -> (matches, diff)``: ``model``'s pools and latents against an eager run.

    ``eager()`` builds a fresh model and runs the loop eagerly (only when verify is called).
    A run that left the pools all zero does not match: its commit write did not land.
    """

    def verify(stats: RunStats) -> tuple[bool, float]:
        eager_model, eager_stats = eager()
        diff = max(
            max_rel_diff(model.k_pools + model.v_pools, eager_model.k_pools + eager_model.v_pools),
            max_rel_diff(stats.latents, eager_stats.latents),
        )
        return bool(diff <= TOLERANCE.get(s.dtype, 1e-4) and pools_written(model)), diff

    return verify


def pools_written(model: Model) -> bool:
    return any(bool(p.ne(0).any()) for p in model.k_pools)


__all__ = [
    "TOLERANCE",
    "BlockTables",
    "ChunkInputs",
    "RunStats",
    "chunk_inputs",
    "evict_slots",
    "initial_latents",
    "make_driver",
    "make_verify",
    "max_rel_diff",
    "pools_written",
    "run_loop",
]
