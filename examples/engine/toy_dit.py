"""A tiny causal DiT: the shape of an autoregressive-diffusion engine step, small enough for CPU CI.

Each step denoises one chunk of ``chunk_tokens`` latent tokens. Every layer commits the chunk's
K/V into its paged pools with ``torch.ops.ar_paging.paged_write`` (the mutating custom op the
check watches), then attends over a window gathered from the pools by slot: the previous chunk
(causal context) and the chunk itself. The model is this example's own, not the checker's
built-in scenarios.

Pool layouts (what decides whether Inductor can write the pools in place):

- ``split``: every layer's K and V pool is its own tensor.
- ``fused``: all pools are views of one ``(num_layers, 2, num_slots, heads, head_dim)`` buffer,
  as an engine that allocates its KV cache in one block would have them. The commit op then
  mutates two views of one storage, Inductor keeps a functionalization clone of the pool, and
  every step copies the whole pool: the bug the gate exists to catch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ar_paging.paged_write import paged_write  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
from ar_paging.read_path import gather_window


@dataclass(frozen=True)
class ToyDiTConfig:
    num_layers: int = 2
    dim: int = 32
    heads: int = 2
    head_dim: int = 16
    chunk_tokens: int = 8
    num_chunks: int = 3  # chunks a request generates; the pools hold them all plus a zero "null" chunk

    @property
    def num_slots(self) -> int:
        return (self.num_chunks + 1) * self.chunk_tokens


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of the diffusion timestep ``t`` (shape ``(1,)``) -> ``(dim,)``."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = t.float() * freqs
    return torch.cat([torch.cos(angles), torch.sin(angles)])


class ToyDiTLayer(nn.Module):
    """adaLN-modulated attention + MLP; attention reads the window through the paged pools."""

    def __init__(self, cfg: ToyDiTConfig) -> None:
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        inner = cfg.heads * cfg.head_dim
        self.norm1 = nn.LayerNorm(cfg.dim, elementwise_affine=False)
        self.norm2 = nn.LayerNorm(cfg.dim, elementwise_affine=False)
        self.modulation = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * inner)
        self.proj = nn.Linear(inner, cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 2 * cfg.dim), nn.GELU(), nn.Linear(2 * cfg.dim, cfg.dim))

    def forward(
        self,
        x: torch.Tensor,
        cond: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        write_slots: torch.Tensor,
        window_slots: torch.Tensor,
    ) -> torch.Tensor:
        tokens = x.shape[0]
        shift1, scale1, shift2, scale2 = self.modulation(cond).chunk(4, dim=-1)
        h = self.norm1(x) * (1 + scale1) + shift1
        q, k, v = self.qkv(h).view(tokens, 3, self.heads, self.head_dim).unbind(1)
        torch.ops.ar_paging.paged_write(k_pool, v_pool, k, v, write_slots)  # commit this chunk's K/V
        k_win, v_win = gather_window(k_pool, v_pool, window_slots)  # previous chunk + this chunk
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k_win.transpose(0, 1), v_win.transpose(0, 1))
        x = x + self.proj(attn.transpose(0, 1).reshape(tokens, -1))
        return x + self.mlp(self.norm2(x) * (1 + scale2) + shift2)


class ToyCausalDiT(nn.Module):
    """``forward(x, t, k_pools, v_pools, write_slots, window_slots)``: one denoising step of one chunk."""

    def __init__(self, cfg: ToyDiTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.time_mlp = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.SiLU(), nn.Linear(cfg.dim, cfg.dim))
        self.layers = nn.ModuleList(ToyDiTLayer(cfg) for _ in range(cfg.num_layers))
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        k_pools: list[torch.Tensor],
        v_pools: list[torch.Tensor],
        write_slots: torch.Tensor,
        window_slots: torch.Tensor,
    ) -> torch.Tensor:
        cond = self.time_mlp(timestep_embedding(t, self.cfg.dim))
        for layer, k_pool, v_pool in zip(self.layers, k_pools, v_pools, strict=True):
            x = layer(x, cond, k_pool, v_pool, write_slots, window_slots)
        return self.out(x)


def allocate_pools(cfg: ToyDiTConfig, layout: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Zeroed K and V pools per layer, ``(num_slots, heads, head_dim)`` each, in ``layout``."""
    shape = (cfg.num_slots, cfg.heads, cfg.head_dim)
    if layout == "split":
        return [torch.zeros(shape) for _ in range(cfg.num_layers)], [torch.zeros(shape) for _ in range(cfg.num_layers)]
    if layout == "fused":
        kv = torch.zeros(cfg.num_layers, 2, *shape)
        return [kv[i, 0] for i in range(cfg.num_layers)], [kv[i, 1] for i in range(cfg.num_layers)]
    raise ValueError(f"layout must be 'split' or 'fused', got {layout!r}")


def chunk_slots(cfg: ToyDiTConfig, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(write_slots, window_slots)`` of chunk ``chunk``; slots ``[0, chunk_tokens)`` are the null chunk.

    The window always has ``2 * chunk_tokens`` slots (the previous chunk, or the null chunk for
    chunk 0, then this chunk), so every step has the same shapes and compiles once.
    """
    if not 0 <= chunk < cfg.num_chunks:
        raise ValueError(f"chunk must be in [0, {cfg.num_chunks}), got {chunk}")
    n = cfg.chunk_tokens
    write = torch.arange((chunk + 1) * n, (chunk + 2) * n)
    return write, torch.cat([write - n, write])
