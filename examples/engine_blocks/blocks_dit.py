"""A causal DiT compiled the way vLLM-Omni compiles its blocks, with its pools in a cache object.

What differs from ``examples/engine`` (and is what real engines do):

- **Per-block compile**: :func:`compile_blocks` replaces each block's ``forward`` with
  ``torch.compile(block.forward, backend=..., fullgraph=True, dynamic=False)`` (vLLM-Omni's
  DreamZero); the model's own loop over blocks stays eager. Every block has its own pools, so
  one compiled code object serves every block and each call must be attributed to that
  block's pools.
- **Pools in a cache object**: :class:`KVCache` holds one ``LayerKV(k, v)`` NamedTuple per
  layer (vLLM-Omni's split flat pools); the blocks read it through ``self.cache``. The gate
  names the pools with ``compile_checks.pools.pools_from_module(cache, "layers.*")``.
- **Three ways to write the cache** (``write``):
  ``"paged_write"``: ``torch.ops.ar_paging.paged_write``, which declares ``k_pool``/``v_pool``
  mutated (the clean path);
  ``"side_effect"``: ``blocks_example::kv_update``, which writes the cache it looks up in a
  forward context and declares no mutation, returning a dummy that the attention consumes to
  keep the order (vLLM 0.33's ``unified_kv_cache_update`` pattern): it works, but Inductor may
  drop, reorder or CSE around a write it does not know of (an ``undeclared_write``);
  ``"lost"``: the same op whose dummy nobody uses: eager writes the cache, the compiled
  block does not (a ``lost_write``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ar_paging.paged_write import paged_write  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
from ar_paging.read_path import gather_window

WRITES = ("paged_write", "side_effect", "lost")

# the engine's forward context: layer index -> its LayerKV, looked up by the side-effect op
FORWARD_CONTEXT: dict[int, LayerKV] = {}


@dataclass(frozen=True)
class BlocksConfig:
    num_layers: int = 2
    dim: int = 32
    heads: int = 2
    head_dim: int = 16
    chunk_tokens: int = 8
    num_chunks: int = 3

    @property
    def num_slots(self) -> int:
        return (self.num_chunks + 1) * self.chunk_tokens  # + a zero "null" chunk read by chunk 0


class LayerKV(NamedTuple):
    k: torch.Tensor
    v: torch.Tensor


class KVCache:
    """The engine's private cache object: one ``LayerKV`` per layer, ``fused`` or split."""

    def __init__(self, cfg: BlocksConfig, layout: str = "split") -> None:
        shape = (cfg.num_slots, cfg.heads, cfg.head_dim)
        if layout == "split":
            self.layers = [LayerKV(torch.zeros(shape), torch.zeros(shape)) for _ in range(cfg.num_layers)]
        elif layout == "fused":  # K and V of a layer as two views of one allocation: the V pool is cloned
            self.layers = [LayerKV(*torch.zeros(2, *shape).unbind(0)) for _ in range(cfg.num_layers)]
        else:
            raise ValueError(f"layout must be 'split' or 'fused', got {layout!r}")


@torch.library.custom_op("blocks_example::kv_update", mutates_args=())
def kv_update(k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, layer: int) -> torch.Tensor:
    """Write ``k``/``v`` into the forward context's cache of ``layer``; declares no mutation."""
    kv = FORWARD_CONTEXT[layer]
    kv.k.index_copy_(0, slots, k)
    kv.v.index_copy_(0, slots, v)
    return torch.empty(0, dtype=k.dtype)  # the dummy that orders the write before the attention


@kv_update.register_fake
def _(k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, layer: int) -> torch.Tensor:
    return torch.empty(0, dtype=k.dtype)


@torch.library.custom_op("blocks_example::paged_attention", mutates_args=())
def paged_attention(q: torch.Tensor, write_done: torch.Tensor, window_slots: torch.Tensor, layer: int) -> torch.Tensor:
    """Attention over the window gathered from the forward context's cache (vLLM's attention op
    reads its cache the same way); ``write_done`` is the write's dummy, a pure ordering edge."""
    kv = FORWARD_CONTEXT[layer]
    k_win, v_win = gather_window(kv.k, kv.v, window_slots)
    return F.scaled_dot_product_attention(q.transpose(0, 1), k_win.transpose(0, 1), v_win.transpose(0, 1))


@paged_attention.register_fake
def _(q: torch.Tensor, write_done: torch.Tensor, window_slots: torch.Tensor, layer: int) -> torch.Tensor:
    return q.new_empty(q.shape[1], q.shape[0], q.shape[2])


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = t.float() * freqs
    return torch.cat([torch.cos(angles), torch.sin(angles)])


class Block(nn.Module):
    """adaLN attention + MLP; commits the chunk's K/V, then attends over the window from the cache."""

    def __init__(self, cfg: BlocksConfig, index: int, cache: KVCache, write: str) -> None:
        super().__init__()
        if write not in WRITES:
            raise ValueError(f"write must be one of {WRITES}, got {write!r}")
        self.index, self.cache, self.write = index, cache, write
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        inner = cfg.heads * cfg.head_dim
        self.norm = nn.LayerNorm(cfg.dim, elementwise_affine=False)
        self.modulation = nn.Linear(cfg.dim, 2 * cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * inner)
        self.proj = nn.Linear(inner, cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 2 * cfg.dim), nn.GELU(), nn.Linear(2 * cfg.dim, cfg.dim))

    def forward(
        self, x: torch.Tensor, cond: torch.Tensor, write_slots: torch.Tensor, window_slots: torch.Tensor
    ) -> torch.Tensor:
        tokens = x.shape[0]
        kv = self.cache.layers[self.index]  # read through the cache object, as the engine keeps it
        shift, scale = self.modulation(cond).chunk(2, dim=-1)
        h = self.norm(x) * (1 + scale) + shift
        q, k, v = self.qkv(h).view(tokens, 3, self.heads, self.head_dim).unbind(1)
        if self.write == "paged_write":
            torch.ops.ar_paging.paged_write(kv.k, kv.v, k, v, write_slots)
            k_win, v_win = gather_window(kv.k, kv.v, window_slots)
            attn = F.scaled_dot_product_attention(q.transpose(0, 1), k_win.transpose(0, 1), v_win.transpose(0, 1))
        else:
            dummy = torch.ops.blocks_example.kv_update(k, v, write_slots, self.index)
            # "side_effect" hands the dummy to the attention op (vLLM's ordering edge); "lost" does
            # not, so nothing uses the write's output and Inductor removes the write
            done = dummy if self.write == "side_effect" else q.new_empty(0)
            attn = torch.ops.blocks_example.paged_attention(q, done, window_slots, self.index)
        x = x + self.proj(attn.transpose(0, 1).reshape(tokens, -1))
        return x + self.mlp(self.norm(x))


class BlocksDiT(nn.Module):
    """One denoising step of one chunk: ``forward(x, t, write_slots, window_slots)``."""

    def __init__(self, cfg: BlocksConfig, cache: KVCache, write: str = "paged_write") -> None:
        super().__init__()
        self.cfg = cfg
        self.time_mlp = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.SiLU(), nn.Linear(cfg.dim, cfg.dim))
        self.blocks = nn.ModuleList(Block(cfg, i, cache, write) for i in range(cfg.num_layers))
        self.out = nn.Linear(cfg.dim, cfg.dim)
        self.kv_cache = cache

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, write_slots: torch.Tensor, window_slots: torch.Tensor
    ) -> torch.Tensor:
        # the forward context is set per step, as vLLM's set_forward_context does: several engines
        # (or cases) in one process each see their own cache
        FORWARD_CONTEXT.clear()
        FORWARD_CONTEXT.update(enumerate(self.kv_cache.layers))
        cond = self.time_mlp(timestep_embedding(t, self.cfg.dim))
        for block in self.blocks:
            x = block(x, cond, write_slots, window_slots)
        return self.out(x)


def compile_blocks(model: BlocksDiT, backend: Any) -> BlocksDiT:
    """vLLM-Omni's per-block compile: each block's ``forward`` compiled in place; returns the model."""
    for block in model.blocks:
        block.forward = torch.compile(block.forward, backend=backend, fullgraph=True, dynamic=False)
    return model


def chunk_slots(cfg: BlocksConfig, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(write_slots, window_slots)``: this chunk's slots, and the previous chunk's + this chunk's."""
    n = cfg.chunk_tokens
    write = torch.arange((chunk + 1) * n, (chunk + 2) * n)
    return write, torch.cat([write - n, write])


def rollout(cfg: BlocksConfig, noise: torch.Tensor) -> Callable[[Callable[..., Any]], torch.Tensor]:
    """The engine's host loop: one step per chunk; each chunk reads the previous one from the cache."""
    t = torch.tensor([0.5])

    def drive(step: Callable[..., Any]) -> torch.Tensor:
        return torch.stack([step(noise[c], t, *chunk_slots(cfg, c)) for c in range(cfg.num_chunks)])

    return drive
