"""Scenarios: a small causal video-DiT denoising loop on ar_paging, checked for pool clones.

Each chunk of ``chunk_size`` latent tokens is denoised in ``denoise_steps`` steps; every
step runs ``num_layers / layers_per_region`` calls of one compiled *region* function,
each covering ``layers_per_region`` layers. A layer gathers its resident window from
the paged pools (block-table gather: slots from ``ar_paging.resident_window`` on the
host, padded to a fixed capacity and masked, so shapes stay static), attends with the
chunk's queries over ``[window K/V ; chunk K/V]`` and runs a small MLP. Only the last
step of a chunk commits (``paged_write`` of every layer's chunk K/V): commit and
non-commit steps are two graphs. Between chunks, eviction runs on a real vLLM
``BlockPool`` through ``ChunkWindowManager`` (sink chunks kept, gap chunks nulled).

The same loop runs eagerly on a copy of the pools; the compiled pools must match.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ar_paging import (
    ChunkWindowSpec,
    chunk_slot_mapping,
    gather_window,
    resident_window,
)
from compile_checks.api import CloneCheck
from compile_checks.findings import CloneReport

LAYOUTS: tuple[str, ...] = ("split", "fused", "fused_kv", "list", "module_attr")


@dataclass(frozen=True)
class Scenario:
    name: str
    layout: str = "split"  # "split" | "fused" | "list" | "module_attr" (| "fused_kv")
    num_layers: int = 2
    layers_per_region: int = 1
    dtype: torch.dtype = torch.float32
    num_blocks: int = 64
    block_size: int = 16
    num_kv_heads: int = 2
    head_dim: int = 32
    chunk_size: int = 16  # tokens per chunk (multiple of block_size)
    denoise_steps: int = 3
    num_chunks: int = 3
    window_chunks: int = 2
    sink_chunks: int = 1
    batch: int = 1
    dynamic: bool = False
    functionalization: str = "v2"  # "v2" | "v1"
    read_after_write: bool = False
    expect_clean: bool = True
    description: str = ""
    # extra torch._inductor.config patches for this scenario, e.g. (("reorder_for_locality", False),)
    inductor_config: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.functionalization not in ("v1", "v2"):
            raise ValueError(f"functionalization must be 'v1' or 'v2', got {self.functionalization!r}")
        if self.num_layers % self.layers_per_region:
            raise ValueError(
                f"num_layers ({self.num_layers}) must be a multiple of layers_per_region ({self.layers_per_region})"
            )
        if self.chunk_size % self.block_size:
            raise ValueError(f"chunk_size ({self.chunk_size}) must be a multiple of block_size ({self.block_size})")

    @property
    def hidden(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def window_capacity(self) -> int:
        """Resident tokens at most (sink + window chunks): the padded gather size."""
        return (self.sink_chunks + self.window_chunks) * self.chunk_size

    @property
    def num_regions_per_step(self) -> int:
        return self.num_layers // self.layers_per_region

    @property
    def pool_bytes(self) -> int:
        """One K (or V) pool of one layer."""
        return self.num_slots * self.num_kv_heads * self.head_dim * self.dtype.itemsize

    @property
    def total_pool_bytes(self) -> int:
        """All layers, K and V."""
        return 2 * self.num_layers * self.pool_bytes


@dataclass
class ScenarioResult:
    scenario: Scenario
    report: CloneReport
    num_steps: int  # denoising steps executed in the run (all chunks)
    num_chunks: int
    ideal_read_bytes: int  # the resident window K/V, all layers, all steps
    ideal_write_bytes: int  # chunk K/V of every layer, once per chunk
    compile_seconds: float
    wall_seconds: float
    eager_match: bool = True  # compiled pools/latents == an eager run's
    max_abs_diff: float = 0.0  # max |compiled - eager| / max(1, max |eager|) over pools and latents
    evicted_blocks: int = 0  # blocks the chunk-window manager nulled during the run
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.report.clones

    @property
    def passed(self) -> bool:
        return self.clean == self.scenario.expect_clean

    @property
    def clone_traffic_per_run(self) -> int:
        """Bytes the surviving clones move over the run (read + write, every region call)."""
        per_region = {}
        for c in self.report.clones:
            per_region.setdefault(c.region, set()).add((c.node, c.nbytes))
        total = 0
        for region, nodes in per_region.items():
            total += 2 * sum(n for _, n in nodes) * self.report.region_calls.get(region, 0)
        return total


# ---------------------------------------------------------------------------------------------
# the model: fixed seeded weights, one layer = window gather + attention + MLP (+ commit)
# ---------------------------------------------------------------------------------------------

WEIGHT_NAMES: tuple[str, ...] = ("wq", "wk", "wv", "wo", "w1", "w2")


def make_weights(s: Scenario, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Per-layer projection / MLP weights (deterministic)."""
    g = torch.Generator().manual_seed(seed)
    h = s.hidden
    shapes = {"wq": (h, h), "wk": (h, h), "wv": (h, h), "wo": (h, h), "w1": (h, 2 * h), "w2": (2 * h, h)}
    out = []
    for _ in range(s.num_layers):
        out.append(
            {n: (torch.randn(shapes[n], generator=g) / math.sqrt(shapes[n][0])).to(s.dtype) for n in WEIGHT_NAMES}
        )
    return out


def _rms(h: torch.Tensor) -> torch.Tensor:
    """RMS norm (no weight): keeps the residual stream O(1) so compiled == eager is a tight check."""
    return (h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype)


def layer_forward(
    h: torch.Tensor,
    w: Sequence[torch.Tensor],
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    win_slots: torch.Tensor,
    win_bias: torch.Tensor,
    commit_slots: torch.Tensor,
    commit: bool,
    read_after_write: bool,
) -> torch.Tensor:
    """One causal DiT layer on a chunk: gather window, attend over [window ; chunk], MLP, maybe commit.

    h: (B, T, hidden); win_slots: (B, W) long; win_bias: (B, 1, 1, W + T) float32;
    commit_slots: (B, T) long; pools flat (num_slots, H, D).
    """
    wq, wk, wv, wo, w1, w2 = w
    b, t, hidden = h.shape
    heads, dim = k_pool.shape[1], k_pool.shape[2]
    x = _rms(h)
    q = (x @ wq).view(b, t, heads, dim)
    k_new = (x @ wk).view(b, t, heads, dim)
    v_new = (x @ wv).view(b, t, heads, dim)
    k_win, v_win = gather_window(k_pool, v_pool, win_slots.reshape(-1))
    k_all = torch.cat([k_win.view(b, -1, heads, dim), k_new], dim=1)
    v_all = torch.cat([v_win.view(b, -1, heads, dim), v_new], dim=1)
    scores = torch.einsum("bthd,bshd->bhts", q.float(), k_all.float()) / math.sqrt(dim) + win_bias
    attn = torch.einsum("bhts,bshd->bthd", scores.softmax(dim=-1), v_all.float()).to(h.dtype)
    h = h + attn.reshape(b, t, hidden) @ wo
    h = h + torch.nn.functional.gelu(_rms(h) @ w1) @ w2
    if commit:
        torch.ops.ar_paging.paged_write(k_pool, v_pool, k_new, v_new, commit_slots)
        if read_after_write:
            # read the just-committed K back from the pool in the same region
            k_back = k_pool.index_select(0, commit_slots.reshape(-1)).view(b, t, hidden)
            h = h + 1e-3 * k_back
    return h


# region functions, one per layout: each runs `layers_per_region` layers ------------------------


def region_split(h, weights, k_pools, v_pools, win_slots, win_bias, commit_slots, commit, raw):  # type: ignore[no-untyped-def]
    """K and V of each layer passed as separate arguments (tuples).

    Used by "split" (two allocations) and "fused" (``kv[0]``, ``kv[1]`` sliced on the host from one
    ``(2, num_slots, H, D)`` allocation: two graph inputs aliasing one storage).
    """
    for w, k, v in zip(weights, k_pools, v_pools):
        h = layer_forward(h, w, k, v, win_slots, win_bias, commit_slots, commit, raw)
    return h


def region_fused_kv(h, weights, kv_pools, win_slots, win_bias, commit_slots, commit, raw):  # type: ignore[no-untyped-def]
    """The whole (2, num_slots, H, D) tensor is the input; k, v = kv[0], kv[1] inside the region."""
    for w, kv in zip(weights, kv_pools):
        h = layer_forward(h, w, kv[0], kv[1], win_slots, win_bias, commit_slots, commit, raw)
    return h


def region_list(h, weights, pools, win_slots, win_bias, commit_slots, commit, raw):  # type: ignore[no-untyped-def]
    """Pools in one mutable Python list [k0, v0, k1, v1, ...], indexed inside the region."""
    for i, w in enumerate(weights):
        h = layer_forward(h, w, pools[2 * i], pools[2 * i + 1], win_slots, win_bias, commit_slots, commit, raw)
    return h


class PagedLayer(torch.nn.Module):
    """A layer owning its weights (parameters) and its K/V cache (buffers)."""

    def __init__(self, w: dict[str, torch.Tensor], k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        super().__init__()
        for n in WEIGHT_NAMES:
            self.register_parameter(n, torch.nn.Parameter(w[n], requires_grad=False))
        self.register_buffer("k_cache", k_cache, persistent=False)
        self.register_buffer("v_cache", v_cache, persistent=False)

    def forward(self, h, win_slots, win_bias, commit_slots, commit: bool, raw: bool):  # type: ignore[no-untyped-def]
        w = [getattr(self, n) for n in WEIGHT_NAMES]
        return layer_forward(h, w, self.k_cache, self.v_cache, win_slots, win_bias, commit_slots, commit, raw)


class PagedRegion(torch.nn.Module):
    """``layers_per_region`` PagedLayers: the compiled unit of the module_attr layout."""

    def __init__(self, layers: list[PagedLayer]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, h, win_slots, win_bias, commit_slots, commit: bool, raw: bool):  # type: ignore[no-untyped-def]
        for layer in self.layers:
            h = layer(h, win_slots, win_bias, commit_slots, commit, raw)
        return h


def region_module(module, h, win_slots, win_bias, commit_slots, commit, raw):  # type: ignore[no-untyped-def]
    """Pools held as module buffers; the module is an argument of the compiled function."""
    return module(h, win_slots, win_bias, commit_slots, commit, raw)


# ---------------------------------------------------------------------------------------------
# pools per layout
# ---------------------------------------------------------------------------------------------


@dataclass
class Model:
    """Pools + weights of one run, and how to call region ``r`` in that layout."""

    scenario: Scenario
    weights: list[dict[str, torch.Tensor]]
    k_pools: list[torch.Tensor]  # flat (num_slots, H, D) views, one per layer
    v_pools: list[torch.Tensor]
    holders: list[Any]  # per region: what the region function receives for its pools

    def named_pools(self) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for i, (k, v) in enumerate(zip(self.k_pools, self.v_pools)):
            out[f"layer{i}.k"] = k
            out[f"layer{i}.v"] = v
        return out

    def region_fn(self) -> Callable[..., torch.Tensor]:
        return {
            "split": region_split,
            "fused": region_split,
            "fused_kv": region_fused_kv,
            "list": region_list,
            "module_attr": region_module,
        }[self.scenario.layout]

    def region_args(self, r: int, h: torch.Tensor, win_slots, win_bias, commit_slots, commit: bool) -> tuple:  # type: ignore[no-untyped-def]
        s = self.scenario
        raw = s.read_after_write
        if s.layout == "module_attr":
            return (self.holders[r], h, win_slots, win_bias, commit_slots, commit, raw)
        lo, hi = r * s.layers_per_region, (r + 1) * s.layers_per_region
        ws = tuple(tuple(self.weights[i][n] for n in WEIGHT_NAMES) for i in range(lo, hi))
        if s.layout in ("split", "fused"):
            return (h, ws, tuple(self.k_pools[lo:hi]), tuple(self.v_pools[lo:hi]), win_slots, win_bias, commit_slots, commit, raw)
        return (h, ws, self.holders[r], win_slots, win_bias, commit_slots, commit, raw)


def build_model(s: Scenario, weights: list[dict[str, torch.Tensor]]) -> Model:
    """Zeroed pools in the scenario's layout (split allocations except for ``fused``)."""
    flat = (s.num_slots, s.num_kv_heads, s.head_dim)
    if s.layout in ("fused", "fused_kv"):
        kvs = [torch.zeros((2, *flat), dtype=s.dtype) for _ in range(s.num_layers)]
        k_pools, v_pools = [kv[0] for kv in kvs], [kv[1] for kv in kvs]
    else:
        k_pools = [torch.zeros(flat, dtype=s.dtype) for _ in range(s.num_layers)]
        v_pools = [torch.zeros(flat, dtype=s.dtype) for _ in range(s.num_layers)]
    lpr = s.layers_per_region
    holders: list[Any] = []
    for r in range(s.num_regions_per_step):
        lo, hi = r * lpr, (r + 1) * lpr
        if s.layout == "fused_kv":
            holders.append(tuple(kvs[lo:hi]))
        elif s.layout == "list":
            holders.append([p for i in range(lo, hi) for p in (k_pools[i], v_pools[i])])
        elif s.layout == "module_attr":
            holders.append(PagedRegion([PagedLayer(weights[i], k_pools[i], v_pools[i]) for i in range(lo, hi)]))
        else:
            holders.append(None)
    return Model(s, weights, k_pools, v_pools, holders)


# ---------------------------------------------------------------------------------------------
# the host loop: vLLM block pool + chunk-window eviction + denoising
# ---------------------------------------------------------------------------------------------


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

    def start_chunk(self, seq: int, num_computed: int) -> list[int]:
        """Evict what fell out of the window, allocate the in-flight chunk; the block table."""
        rid = f"seq{seq}"
        before = sum(b.block_id == self.null_block_id for b in self.manager.req_to_blocks.get(rid, []))
        self.manager.remove_skipped_blocks(rid, num_computed)
        total = num_computed + self.s.chunk_size
        self.manager.allocate_new_blocks(rid, total, total)
        blocks = [b.block_id for b in self.manager.req_to_blocks[rid]]
        self.evicted += sum(b == self.null_block_id for b in blocks) - before
        return blocks


@dataclass(frozen=True)
class ChunkInputs:
    win_slots: torch.Tensor  # (B, W) long, padded with slot 0 (the null block)
    win_bias: torch.Tensor  # (B, 1, 1, W + T) float32: 0 resident, -inf padding
    commit_slots: torch.Tensor  # (B, T) long
    resident_tokens: int  # real (unpadded) resident tokens, summed over the batch


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
    num_steps: int = 0
    resident_tokens_read: int = 0  # summed over steps (per layer: multiply by num_layers)
    evicted_blocks: int = 0
    latents: list[torch.Tensor] = field(default_factory=list)


def run_loop(s: Scenario, model: Model, region: Callable[..., torch.Tensor], progress: Callable[[], None] | None = None) -> RunStats:
    """Denoise every chunk; commit after its last step; evict between chunks."""
    tables = BlockTables(s)
    stats = RunStats()
    temb = torch.linspace(0.0, 1.0, s.hidden).to(s.dtype)
    for c, x in enumerate(initial_latents(s)):
        num_computed = c * s.chunk_size
        block_tables = [tables.start_chunk(b, num_computed) for b in range(s.batch)]
        ci = chunk_inputs(s, block_tables, num_computed, tables.null_block_id)
        for step in range(s.denoise_steps):
            commit = step == s.denoise_steps - 1
            tau = 1.0 - step / s.denoise_steps
            h = x + tau * temb
            for r in range(s.num_regions_per_step):
                h = region(*model.region_args(r, h, ci.win_slots, ci.win_bias, ci.commit_slots, commit))
            x = x + (h - x) / s.denoise_steps
            stats.num_steps += 1
            stats.resident_tokens_read += ci.resident_tokens
            if progress is not None:
                progress()
        stats.latents.append(x)
    stats.evicted_blocks = tables.evicted
    return stats


# relative to max |eager|; the denoising loop compounds rounding differences over steps and layers
_TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def _max_diff(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """Largest |compiled - eager| relative to the eager tensor's scale (max |eager|, at least 1)."""
    return max(
        float((x.float() - y.float()).abs().max()) / max(1.0, float(y.float().abs().max())) for x, y in zip(a, b)
    )


def run_scenario(
    s: Scenario, dump_dir: Path | None = None, progress: bool = False, analysis_only: bool = False
) -> ScenarioResult:
    """Run the scenario compiled (under the clone check) and eagerly; compare; report.

    ``analysis_only`` stops Inductor after its post-grad passes and runs that graph (no C++
    codegen): same verdict, much faster, no kernel bytes. The CLI gate always compiles fully.
    """
    t0 = time.perf_counter()
    weights = make_weights(s)
    compiled_model = build_model(s, weights)
    eager_model = build_model(s, weights)
    bar, tick = _progress(s, progress)
    check = CloneCheck(
        pools=compiled_model.named_pools(),
        functionalization=s.functionalization,
        dump_dir=dump_dir,
        inductor_config=dict(s.inductor_config),
        analysis_only=analysis_only,
    )
    try:
        with torch.no_grad(), check:
            region = check.compile(compiled_model.region_fn(), dynamic=s.dynamic)
            stats = run_loop(s, compiled_model, region, tick)
    finally:
        if bar is not None:
            bar.close()
    with torch.no_grad():
        eager_stats = run_loop(s, eager_model, eager_model.region_fn())
    report = check.report
    assert report is not None
    tol = _TOLERANCE.get(s.dtype, 1e-4)
    diff = max(
        _max_diff(compiled_model.k_pools + compiled_model.v_pools, eager_model.k_pools + eager_model.v_pools),
        _max_diff(stats.latents, eager_stats.latents),
    )
    touched = any(float(p.abs().sum()) > 0 for p in compiled_model.k_pools)
    per_token = s.num_kv_heads * s.head_dim * s.dtype.itemsize
    result = ScenarioResult(
        scenario=s,
        report=report,
        num_steps=stats.num_steps,
        num_chunks=s.num_chunks,
        ideal_read_bytes=2 * s.num_layers * stats.resident_tokens_read * per_token,
        ideal_write_bytes=2 * s.num_layers * s.num_chunks * s.batch * s.chunk_size * per_token,
        compile_seconds=sum(r.compile_seconds for r in check.probe.regions),
        wall_seconds=time.perf_counter() - t0,
        eager_match=bool(diff <= tol and touched),
        max_abs_diff=diff,
        evicted_blocks=stats.evicted_blocks,
    )
    if not touched:
        result.notes.append("the compiled run left the pools all zero: the commit write did not land")
    return result


def _progress(s: Scenario, enabled: bool) -> tuple[Any, Callable[[], None] | None]:
    if not enabled:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=s.num_chunks * s.denoise_steps, desc=s.name, unit="step", leave=False)
    return bar, lambda: bar.update(1)


# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------

# 4 chunks with a 1-chunk window + 1 sink chunk: chunk 3 evicts chunk 1 (null block in its table)
_BASE: dict[str, Any] = {"num_chunks": 4, "window_chunks": 1, "sink_chunks": 1}


def _s(name: str, description: str, **kw: Any) -> Scenario:
    return Scenario(name=name, description=description, **{**_BASE, **kw})


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _s("split", "separate K and V allocations per layer, fp32, static shapes, auto_functionalized_v2"),
        _s(
            "fused",
            "NEGATIVE CONTROL: K, V = kv[0], kv[1] of one (2, N, H, D) allocation; reinplace keeps a "
            "clone of the whole 2-pool storage for v_pool",
            layout="fused",
            expect_clean=False,
        ),
        _s(
            "fused_v1",
            "NEGATIVE CONTROL: fused layout under auto_functionalized v1 (vLLM's setting)",
            layout="fused",
            functionalization="v1",
            expect_clean=False,
        ),
        _s(
            "fused_kv",
            "one (2, N, H, D) allocation passed whole; k, v = kv[0], kv[1] inside the region (one graph "
            "input): re-inplaced, no clone",
            layout="fused_kv",
        ),
        _s("split_v1", "split layout under auto_functionalized v1 (enable_auto_functionalized_v2=False)", functionalization="v1"),
        _s("list", "pools passed as one mutable Python list [k0, v0, ...] indexed in the region", layout="list"),
        _s("module_attr", "pools held as nn.Module buffers of per-layer modules, weights as parameters", layout="module_attr"),
        _s(
            "read_after_write",
            "the commit region reads the just-written K back from the pool. Inductor's reorder_for_locality "
            "moves the commit above the window gathers, so reinplace sees later reads of both pools and "
            "keeps a clone of K and of V",
            read_after_write=True,
            expect_clean=False,
        ),
        _s(
            "read_after_write_no_reorder",
            "read_after_write with torch._inductor.config.reorder_for_locality=False: re-inplaced, no clone",
            read_after_write=True,
            inductor_config=(("reorder_for_locality", False),),
        ),
        _s("bf16", "split layout, bfloat16 pools and weights", dtype=torch.bfloat16),
        _s("fp16", "split layout, float16 pools and weights", dtype=torch.float16),
        _s("dynamic", "split layout compiled with dynamic=True (symbolic sizes)", dynamic=True),
        _s(
            "many_layers_per_region",
            "4 layers in one compiled region: every layer but the last keeps a clone of its K and V "
            "(reorder_for_locality again moves a commit above reads of that pool)",
            num_layers=4,
            layers_per_region=4,
            expect_clean=False,
        ),
        _s(
            "many_layers_no_reorder",
            "4 layers in one region with reorder_for_locality=False: re-inplaced, no clone",
            num_layers=4,
            layers_per_region=4,
            inductor_config=(("reorder_for_locality", False),),
        ),
        _s("batch2", "two sequences, each its own vLLM request and block table", batch=2),
    )
}

# the engine's production shape (one layer per region, commit after the last step) in each
# layout / dtype / functionalization / shape mode that must stay clean
DEFAULT_GATE: tuple[str, ...] = ("split", "split_v1", "list", "module_attr", "bf16", "dynamic")


def scenario(name: str) -> Scenario:
    """Registry lookup with a message that lists the valid names."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; valid: {', '.join(SCENARIOS)}") from None


__all__ = [
    "DEFAULT_GATE",
    "SCENARIOS",
    "Scenario",
    "ScenarioResult",
    "run_scenario",
    "scenario",
]
