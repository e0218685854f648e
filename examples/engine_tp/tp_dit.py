"""A tiny causal DiT sharded by attention heads (tensor parallel), one shard per rank.

Column-parallel ``qkv`` (each rank computes its ``heads / world_size`` heads), row-parallel ``proj``
whose partial sums are combined with ``torch.distributed.all_reduce``: the collective sits in the
compiled graph between two layers' commits, as in a TP engine. Each rank commits its heads' K/V into
its own pools with ``torch.ops.ar_paging.paged_write`` and attends over a window gathered from them.

Every rank builds the same full weights from one seed and keeps its slice, so the sharded model
computes what the unsharded one does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ar_paging.paged_write import paged_write  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
from ar_paging.read_path import gather_window


@dataclass(frozen=True)
class TPConfig:
    num_layers: int = 2
    dim: int = 32
    heads: int = 4  # in total; each rank holds heads // world_size
    head_dim: int = 8
    chunk_tokens: int = 8
    num_chunks: int = 2

    @property
    def num_slots(self) -> int:
        return (self.num_chunks + 1) * self.chunk_tokens


class TPLayer(nn.Module):
    """Attention over the paged window with this rank's heads; the projection's partial sums all-reduced."""

    def __init__(self, cfg: TPConfig, rank: int, world_size: int, gen: torch.Generator) -> None:
        super().__init__()
        if cfg.heads % world_size:
            raise ValueError(f"{cfg.heads} heads do not shard over {world_size} ranks")
        self.local_heads, self.head_dim = cfg.heads // world_size, cfg.head_dim
        inner = cfg.heads * cfg.head_dim
        qkv = torch.randn(3, cfg.heads, cfg.head_dim, cfg.dim, generator=gen) / cfg.dim**0.5  # the full weights
        proj = torch.randn(cfg.dim, cfg.heads, cfg.head_dim, generator=gen) / inner**0.5
        mine = slice(rank * self.local_heads, (rank + 1) * self.local_heads)
        self.register_buffer("qkv", qkv[:, mine].reshape(-1, cfg.dim).contiguous())  # column-parallel
        self.register_buffer("proj", proj[:, mine].reshape(cfg.dim, -1).contiguous())  # row-parallel
        self.norm = nn.LayerNorm(cfg.dim, elementwise_affine=False)

    def forward(
        self, x: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, write: torch.Tensor, window: torch.Tensor
    ) -> torch.Tensor:
        tokens = x.shape[0]
        q, k, v = F.linear(self.norm(x), self.qkv).view(tokens, 3, self.local_heads, self.head_dim).unbind(1)
        torch.ops.ar_paging.paged_write(k_pool, v_pool, k, v, write)  # commit this rank's heads
        k_win, v_win = gather_window(k_pool, v_pool, window)
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k_win.transpose(0, 1), v_win.transpose(0, 1))
        partial = F.linear(attn.transpose(0, 1).reshape(tokens, -1), self.proj)
        if dist.is_initialized():
            dist.all_reduce(partial)  # the row-parallel sum over ranks (a collective in the compiled graph)
        return x + partial


class TPCausalDiT(nn.Module):
    """``forward(x, k_pools, v_pools, write, window)``: one step of one chunk on this rank's shard."""

    def __init__(self, cfg: TPConfig, rank: int = 0, world_size: int = 1) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.layers = nn.ModuleList(TPLayer(cfg, rank, world_size, gen) for _ in range(cfg.num_layers))

    def forward(
        self,
        x: torch.Tensor,
        k_pools: list[torch.Tensor],
        v_pools: list[torch.Tensor],
        write: torch.Tensor,
        window: torch.Tensor,
    ) -> torch.Tensor:
        for layer, k_pool, v_pool in zip(self.layers, k_pools, v_pools, strict=True):
            x = layer(x, k_pool, v_pool, write, window)
        return x


def allocate_pools(cfg: TPConfig, layout: str, world_size: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """This rank's K and V pools, ``(num_slots, heads // world_size, head_dim)`` each, "split" or "fused"."""
    shape = (cfg.num_slots, cfg.heads // world_size, cfg.head_dim)
    if layout == "split":
        return [torch.zeros(shape) for _ in range(cfg.num_layers)], [torch.zeros(shape) for _ in range(cfg.num_layers)]
    if layout == "fused":  # one (layers, 2, ...) allocation: K and V are views of one storage
        kv = torch.zeros(cfg.num_layers, 2, *shape)
        return [kv[i, 0] for i in range(cfg.num_layers)], [kv[i, 1] for i in range(cfg.num_layers)]
    raise ValueError(f"layout must be 'split' or 'fused', got {layout!r}")


def chunk_slots(cfg: TPConfig, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(write, window)`` slots of ``chunk``: the previous chunk (or the null chunk 0) and this one."""
    n = cfg.chunk_tokens
    write = torch.arange((chunk + 1) * n, (chunk + 2) * n)
    return write, torch.cat([write - n, write])
