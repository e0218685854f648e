"""A Wan-2.1-14B-like causal DiT, built without allocating and compiled per block as in production.

The production configuration (:data:`WAN_14B`): 40 blocks, hidden 5120, 40 heads of 128, FFN 13824,
bf16: about 14 B parameters (28 GB) and, for a window of four 1560-token latent frames, 40 x 2 pools
of 64 MB (5.1 GB). Built ``with torch.device("meta"):`` nothing is allocated; the gate compiles the
meta tensors as FakeTensors and reads the verdict from Inductor's post-grad graph.

Each block: adaLN modulation from the timestep, self-attention whose K/V are committed with
``torch.ops.ar_paging.paged_write`` into the layer's pools before the window (previous chunk + this
chunk) is gathered back from them, text cross-attention, and a gated FFN. Layouts (``KVCache``):

- ``split``: K and V of a layer are two allocations: the commit is written in place (clean).
- ``fused``: K and V of a layer are two views of one allocation: Inductor cannot reinplace the V
  write and copies the whole V pool, once per block per call (the negative control).
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


@dataclass(frozen=True)
class WanConfig:
    num_layers: int = 40
    dim: int = 5120
    heads: int = 40
    ffn_dim: int = 13824
    text_dim: int = 4096
    text_tokens: int = 512
    frame_tokens: int = 1560  # one latent frame of a 480p video: 30 x 52 patches
    window_frames: int = 4  # frames the pools hold: the window read (2) plus room to write ahead
    freq_dim: int = 256
    dtype: torch.dtype = torch.bfloat16

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def num_slots(self) -> int:
        return self.window_frames * self.frame_tokens


WAN_14B = WanConfig()
# the same structure at a width and depth real tensors fit on a CI runner (meta == real is tested there)
WAN_SMALL = WanConfig(
    num_layers=2, dim=64, heads=4, ffn_dim=128, text_dim=48, text_tokens=6, frame_tokens=8, freq_dim=32
)


class LayerKV(NamedTuple):
    k: torch.Tensor
    v: torch.Tensor


class KVCache:
    """One ``LayerKV`` of flat ``(num_slots, heads, head_dim)`` pools per block, ``split`` or ``fused``."""

    def __init__(self, cfg: WanConfig, layout: str = "split") -> None:
        shape = (cfg.num_slots, cfg.heads, cfg.head_dim)
        if layout == "split":
            self.layers = [
                LayerKV(torch.zeros(shape, dtype=cfg.dtype), torch.zeros(shape, dtype=cfg.dtype))
                for _ in range(cfg.num_layers)
            ]
        elif layout == "fused":  # K and V of a layer as two views of one allocation: the V pool is copied
            self.layers = [LayerKV(*torch.zeros(2, *shape, dtype=cfg.dtype).unbind(0)) for _ in range(cfg.num_layers)]
        else:
            raise ValueError(f"layout must be 'split' or 'fused', got {layout!r}")


def sinusoidal(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = t.float()[:, None] * freqs
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class Block(nn.Module):
    """Wan's attention block with a paged self-attention cache."""

    def __init__(self, cfg: WanConfig, index: int, cache: KVCache) -> None:
        super().__init__()
        self.index, self.cache = index, cache
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        dim = cfg.dim
        self.modulation = nn.Parameter(torch.zeros(1, 6, dim, dtype=cfg.dtype))
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6, dtype=cfg.dtype)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, dtype=cfg.dtype) for _ in range(4))
        self.norm_q = nn.RMSNorm(dim, eps=1e-6, dtype=cfg.dtype)
        self.norm_k = nn.RMSNorm(dim, eps=1e-6, dtype=cfg.dtype)
        self.norm3 = nn.LayerNorm(dim, eps=1e-6, dtype=cfg.dtype)
        self.cross_q, self.cross_k, self.cross_v, self.cross_o = (
            nn.Linear(dim, dim, dtype=cfg.dtype) for _ in range(4)
        )
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6, dtype=cfg.dtype)
        self.ffn = nn.Sequential(
            nn.Linear(dim, cfg.ffn_dim, dtype=cfg.dtype),
            nn.GELU(approximate="tanh"),
            nn.Linear(cfg.ffn_dim, dim, dtype=cfg.dtype),
        )

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(t.shape[0], self.heads, self.head_dim)

    def forward(
        self,
        x: torch.Tensor,
        e: torch.Tensor,
        context: torch.Tensor,
        write_slots: torch.Tensor,
        window_slots: torch.Tensor,
    ) -> torch.Tensor:
        kv = self.cache.layers[self.index]  # read through the cache object, as the engine keeps it
        shift1, scale1, gate1, shift2, scale2, gate2 = (self.modulation + e).chunk(6, dim=1)
        h = self.norm1(x) * (1 + scale1[0]) + shift1[0]
        q = self._heads(self.norm_q(self.q(h)))
        k = self._heads(self.norm_k(self.k(h)))
        v = self._heads(self.v(h))
        torch.ops.ar_paging.paged_write(kv.k, kv.v, k, v, write_slots)  # commit the chunk first
        k_win, v_win = gather_window(kv.k, kv.v, window_slots)  # then read the window back
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k_win.transpose(0, 1), v_win.transpose(0, 1))
        x = x + gate1[0] * self.o(attn.transpose(0, 1).reshape(x.shape[0], -1))
        cq = self._heads(self.cross_q(self.norm3(x))).transpose(0, 1)
        ck = self._heads(self.cross_k(context)).transpose(0, 1)
        cv = self._heads(self.cross_v(context)).transpose(0, 1)
        cross = F.scaled_dot_product_attention(cq, ck, cv).transpose(0, 1).reshape(x.shape[0], -1)
        x = x + self.cross_o(cross)
        return x + gate2[0] * self.ffn(self.norm2(x) * (1 + scale2[0]) + shift2[0])


class WanDiT(nn.Module):
    """One denoising step of one latent frame: ``forward(x, t, text, write_slots, window_slots)``."""

    def __init__(self, cfg: WanConfig, cache: KVCache) -> None:
        super().__init__()
        self.cfg = cfg
        dim = cfg.dim
        self.time_embedding = nn.Sequential(
            nn.Linear(cfg.freq_dim, dim, dtype=cfg.dtype), nn.SiLU(), nn.Linear(dim, dim, dtype=cfg.dtype)
        )
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim, dtype=cfg.dtype))
        self.text_embedding = nn.Sequential(
            nn.Linear(cfg.text_dim, dim, dtype=cfg.dtype),
            nn.GELU(approximate="tanh"),
            nn.Linear(dim, dim, dtype=cfg.dtype),
        )
        self.blocks = nn.ModuleList(Block(cfg, i, cache) for i in range(cfg.num_layers))
        self.head = nn.Linear(dim, dim, dtype=cfg.dtype)
        self.kv_cache = cache

    def forward(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        text: torch.Tensor,
        write_slots: torch.Tensor,
        window_slots: torch.Tensor,
    ) -> torch.Tensor:
        e = self.time_embedding(sinusoidal(t, self.cfg.freq_dim).to(x.dtype))
        e0 = self.time_projection(e).unflatten(1, (6, self.cfg.dim))
        context = self.text_embedding(text)
        for block in self.blocks:
            x = block(x, e0, context, write_slots, window_slots)
        return self.head(x)


def compile_blocks(model: WanDiT, backend: Any) -> None:
    """The engine's per-block compile (vLLM-Omni's DreamZero): each block's ``forward`` compiled in place.

    One code object serves every block and dynamo compiles it once per block, so the engine raises
    dynamo's recompile limit (default 8) to its depth, as a production engine must.
    """
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(limit, len(model.blocks))
    for block in model.blocks:
        block.forward = torch.compile(block.forward, backend=backend, fullgraph=True, dynamic=False)


def frame_slots(cfg: WanConfig, frame: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(write_slots, window_slots)`` of a frame: its own slots, and the previous frame's + its own."""
    n = cfg.frame_tokens
    write = torch.arange((frame + 1) * n, (frame + 2) * n) % cfg.num_slots
    return write, torch.cat([(write - n) % cfg.num_slots, write])


def rollout(cfg: WanConfig, noise: torch.Tensor, text: torch.Tensor, frames: int = 1) -> Callable[[Any], Any]:
    """The host loop: one denoising step per frame; each frame reads the previous one from the cache."""

    def drive(model: Callable[..., Any]) -> torch.Tensor:
        t = torch.full((1,), 500.0)
        return torch.stack([model(noise[f], t, text, *frame_slots(cfg, f)) for f in range(frames)])

    return drive
