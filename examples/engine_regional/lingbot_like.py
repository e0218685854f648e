"""LingBot-World-like blocks compiled the way vLLM-Omni's diffusion runner compiles them by default.

What this reproduces from vLLM-Omni 0.30.0 (``diffusion/models/lingbot_world/transformer.py``,
``experimental/ar_diffusion/kv_cache/paged_attention.py``, ``diffusion/compile.py``), scaled down:

- **Regional compile with dynamic shapes**: :func:`regionally_compile` is vLLM-Omni's function (its
  logger left out): every module whose class is in the model's ``_repeated_blocks`` gets
  ``forward = torch.compile(forward, *args, **kwargs)``; the runner calls it with ``dynamic=True``.
  One code object (``Block.forward``) serves every block.
- **A float argument**: the self-attention's ``softmax_scale`` reaches the fused op as a Python
  float. Under ``dynamic=True`` dynamo first traces it as a symbolic float, AOT cannot keep it a
  tensor (an opaque op's ``float`` argument) and raises ``TensorifyScalarRestartAnalysis``: dynamo
  restarts the frame with the float specialised. The aborted attempt is no compiled region.
- **Two self-attention caches**: the request-local ``AttentionCache`` (``[B, L, H, D]`` key and value,
  Python-int cursors, ``copy_`` of the visible window back into the cache: ``split``; the probe
  step that reads it without committing: ``stale``), and the paged one: ``PagedLayerInputs`` (a
  NamedTuple of flat ``[slots, H, D]`` pools and slot metadata) handed to the fused write+attend op
  ``ar_diffusion_paged_write_attn``, which declares ``key_pool`` / ``value_pool`` mutated.
- **Pool layouts**: ``paged`` allocates K and V apart (vLLM-Omni's own allocation); ``fused_paged``
  takes K and V as the two halves of one ``(2, slots, H, D)`` allocation, the layout that makes
  Inductor clone the allocation in every block call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

LAYOUTS = ("split", "stale", "paged", "fused_paged")


@dataclass(frozen=True)
class LingBotConfig:
    num_layers: int = 2
    dim: int = 64
    heads: int = 2
    block_size: int = 16  # tokens per frame: one paged block
    chunk_frames: int = 2  # frames per AR chunk
    num_chunks: int = 2
    pool_blocks: int = 8  # paged pool size in blocks (fp32 [128, 2, 32]: 32 KiB per pool, 64 KiB for K+V fused)
    sink_tokens: int = 16
    cache_frames: int = 8  # request-local cache capacity, in frames

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def chunk_tokens(self) -> int:
        return self.chunk_frames * self.block_size

    @property
    def num_slots(self) -> int:  # paged pool: the null block 0, then every chunk's blocks, the rest spare
        if self.pool_blocks < 1 + self.num_chunks * self.chunk_frames:
            raise ValueError(f"pool_blocks={self.pool_blocks} cannot hold the null block and {self.num_chunks} chunks")
        return self.pool_blocks * self.block_size


# ---- the request-local cache (LingBotAttentionCache) ---------------------------------------------


@dataclass
class AttentionCache:
    """K/V storage plus its logical cursors (``end``: occupied; ``absolute_end``: next global token)."""

    key: torch.Tensor
    value: torch.Tensor
    end: int = 0
    absolute_end: int = 0
    last_start: int | None = None
    sink_end: int = 0


# ---- the paged cache (ARDiffusionPagedLayerInputs and its fused op) --------------------------------


class PagedLayerInputs(NamedTuple):
    """Compiled-region payload for one layer's paged self-attention (plain tensors and ints)."""

    layer_idx: torch.Tensor
    key_pool: torch.Tensor
    value_pool: torch.Tensor
    block_size: int
    video_slots: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor


def _reference_paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
) -> torch.Tensor:
    block_size = key_cache.shape[1]
    kv_len = int(seq_lens[0].item())
    positions = torch.arange(kv_len, device=query.device)
    physical_blocks = block_table[0, torch.div(positions, block_size, rounding_mode="floor")].long()
    k = key_cache[physical_blocks, positions % block_size]
    v = value_cache[physical_blocks, positions % block_size]
    scores = torch.einsum("qhd,khd->hqk", query.float(), k.float()) * float(softmax_scale)
    # one sequence: vLLM-Omni concatenates the per-sequence outputs, which also makes them contiguous (as the fake says)
    return torch.cat([torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1).to(v.dtype), v)], dim=0)


@torch.library.custom_op("lingbot_like::paged_write_attn", mutates_args=("key_pool", "value_pool"))
def paged_write_attn_op(
    query: torch.Tensor,
    k_curr: torch.Tensor,
    v_curr: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_size: int,
    video_slots: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
) -> torch.Tensor:
    """Write the chunk's K/V at its slots, then attend over the block table (one opaque op per layer)."""
    key_pool[video_slots] = k_curr.to(key_pool.dtype)
    value_pool[video_slots] = v_curr.to(value_pool.dtype)
    key_cache = key_pool.unflatten(0, (-1, block_size))
    value_cache = value_pool.unflatten(0, (-1, block_size))
    return _reference_paged_attention(query, key_cache, value_cache, block_table, seq_lens, softmax_scale)


@paged_write_attn_op.register_fake
def _(query, k_curr, v_curr, key_pool, value_pool, block_size, video_slots, block_table, seq_lens, softmax_scale):  # type: ignore[no-untyped-def]
    return torch.empty_like(query)


# ---- the blocks ------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        value_float = value.float()
        rms = torch.sqrt(value_float.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (value_float / rms * self.weight.float()).to(value.dtype)


class SelfAttention(nn.Module):
    """Block-causal self-attention over retained history and one full chunk (LingBotSelfAttention)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)
        self.norm_q, self.norm_k = RMSNorm(dim), RMSNorm(dim)

    def project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value as ``[B, L, H, D]`` (Q and K normalised)."""
        query, key, value = self.qkv(hidden_states).chunk(3, dim=-1)
        query, key = self.norm_q(query), self.norm_k(key)
        q, k, v = (t.unflatten(2, (self.heads, self.head_dim)) for t in (query, key, value))
        return q, k, v

    def _update_cache(
        self,
        cache: AttentionCache,
        key: torch.Tensor,
        value: torch.Tensor,
        current_start: int,
        *,
        sink_tokens: int,
        update_cache: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """LingBot's ``_update_cache`` (its contiguity checks kept, its error texts shortened)."""
        chunk_tokens, capacity = key.shape[1], cache.key.shape[1]
        next_sink_end = cache.sink_end
        if cache.last_start is None:
            next_key, next_value = key, value
            next_sink_end = max(0, min(chunk_tokens, sink_tokens - current_start))
        elif current_start == cache.last_start:
            prefix_end = cache.end - chunk_tokens
            next_key = torch.cat((cache.key[:, :prefix_end], key), dim=1)
            next_value = torch.cat((cache.value[:, :prefix_end], value), dim=1)
        else:
            if current_start != cache.absolute_end:
                raise ValueError(f"chunks must be contiguous: current_start={current_start}, {cache.absolute_end=}")
            incoming_sink = max(0, min(chunk_tokens, sink_tokens - current_start))
            next_sink_end = cache.sink_end + incoming_sink
            old_local_key = cache.key[:, cache.sink_end : cache.end]
            old_local_value = cache.value[:, cache.sink_end : cache.end]
            retained = min(old_local_key.shape[1], capacity - next_sink_end - (chunk_tokens - incoming_sink))
            old_local_key, old_local_value = (
                old_local_key[:, old_local_key.shape[1] - retained :],
                old_local_value[:, old_local_value.shape[1] - retained :],
            )
            next_key = torch.cat(
                (cache.key[:, : cache.sink_end], key[:, :incoming_sink], old_local_key, key[:, incoming_sink:]), dim=1
            )
            next_value = torch.cat(
                (cache.value[:, : cache.sink_end], value[:, :incoming_sink], old_local_value, value[:, incoming_sink:]),
                dim=1,
            )
        next_end = next_key.shape[1]
        if update_cache:
            cache.key[:, :next_end].copy_(next_key)
            cache.value[:, :next_end].copy_(next_value)
            cache.end, cache.absolute_end = next_end, current_start + chunk_tokens
            cache.last_start, cache.sink_end = current_start, next_sink_end
        return next_key, next_value

    def forward(
        self,
        hidden_states: torch.Tensor,
        *,
        cache: AttentionCache | PagedLayerInputs,
        current_start: int,
        sink_tokens: int,
        update_cache: bool,
        softmax_scale: float,
    ) -> torch.Tensor:
        query, key, value = self.project(hidden_states)
        if isinstance(cache, PagedLayerInputs):
            output = torch.ops.lingbot_like.paged_write_attn(
                query[0],
                key[0],
                value[0],
                cache.key_pool,
                cache.value_pool,
                cache.block_size,
                cache.video_slots,
                cache.block_table,
                cache.seq_lens,
                softmax_scale,
            ).unsqueeze(0)
        else:
            visible_key, visible_value = self._update_cache(
                cache, key, value, current_start, sink_tokens=sink_tokens, update_cache=update_cache
            )
            output = F.scaled_dot_product_attention(
                query.transpose(1, 2), visible_key.transpose(1, 2), visible_value.transpose(1, 2), scale=softmax_scale
            ).transpose(1, 2)
        return self.o(output.flatten(2, 3))


class Block(nn.Module):
    """LingBotAttentionBlock's self-attention half: adaLN modulation per frame, gated residual, FFN."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.self_attn = SelfAttention(dim, heads)
        self.ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(approximate="tanh"), nn.Linear(2 * dim, dim))
        self.modulation = nn.Parameter(torch.randn(1, 4, dim) / math.sqrt(dim))

    def forward(
        self,
        hidden_states: torch.Tensor,
        timestep_projection: torch.Tensor,
        *,
        self_cache: AttentionCache | PagedLayerInputs,
        current_start: int,
        sink_tokens: int,
        update_cache: bool,
        softmax_scale: float,
    ) -> torch.Tensor:
        tokens = hidden_states.shape[1]
        frames = timestep_projection.shape[1]
        per_frame = tokens // frames
        modulation = self.modulation.unsqueeze(1) + timestep_projection.float()
        shift, scale, shift_ffn, scale_ffn = modulation.chunk(4, dim=2)
        normalized = self.norm1(hidden_states.float()).unflatten(1, (frames, per_frame))
        normalized = (normalized * (1 + scale) + shift).flatten(1, 2).to(hidden_states.dtype)
        hidden_states = hidden_states + self.self_attn(
            normalized,
            cache=self_cache,
            current_start=current_start,
            sink_tokens=sink_tokens,
            update_cache=update_cache,
            softmax_scale=softmax_scale,
        )
        normalized = self.norm2(hidden_states.float()).unflatten(1, (frames, per_frame))
        normalized = (normalized * (1 + scale_ffn) + shift_ffn).flatten(1, 2).to(hidden_states.dtype)
        return hidden_states + self.ffn(normalized)


class LingBotLike(nn.Module):
    """The transformer: a time projection, then every block in turn with its own cache."""

    _repeated_blocks: ClassVar[list[str]] = ["Block"]

    def __init__(self, cfg: LingBotConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.time_projection = nn.Linear(1, 4 * cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads) for _ in range(cfg.num_layers))

    def forward(
        self,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        caches: list[Any],
        *,
        current_start: int,
        update_cache: bool,
    ) -> torch.Tensor:
        frames = hidden_states.shape[1] // self.cfg.block_size
        projection = self.time_projection(timestep.view(1, 1, 1).expand(1, frames, 1)).unflatten(2, (4, self.cfg.dim))
        softmax_scale = self.cfg.head_dim**-0.5  # a Python float, handed to every block
        for block, cache in zip(self.blocks, caches, strict=True):
            hidden_states = block(
                hidden_states,
                projection,
                self_cache=cache,
                current_start=current_start,
                sink_tokens=self.cfg.sink_tokens,
                update_cache=update_cache,
                softmax_scale=softmax_scale,
            )
        return hidden_states


def regionally_compile(model: nn.Module, *compile_args: Any, **compile_kwargs: Any) -> nn.Module:
    """vLLM-Omni 0.30.0's ``regionally_compile`` (``diffusion/compile.py``) without its logger and offload hooks.

    Every module whose class is in ``model._repeated_blocks`` (or ``<attr>.<digit>`` under
    ``_layerwise_offload_blocks_attrs``) gets its ``forward`` replaced by ``torch.compile(forward, ...)``.
    """
    repeated_blocks = getattr(model, "_repeated_blocks", None)
    if not repeated_blocks:
        return model
    repeated_block_attrs = getattr(model, "_layerwise_offload_blocks_attrs", [])
    compiled_forwards = []
    for name, submod in model.named_modules():
        parts = name.split(".")
        if submod.__class__.__name__ in repeated_blocks or (
            len(parts) >= 2 and parts[-2] in repeated_block_attrs and parts[-1].isdigit()
        ):
            compiled_forwards.append((submod, torch.compile(submod.forward, *compile_args, **compile_kwargs)))
    for submod, compiled_forward in compiled_forwards:
        submod.forward = compiled_forward
    return model


# ---- the caches and the host loop ------------------------------------------------------------------


class Caches:
    """One layout's self-attention caches for every layer, and the pools to name."""

    def __init__(self, cfg: LingBotConfig, layout: str) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.cfg, self.layout = cfg, layout
        if layout in ("split", "stale"):
            shape = (1, cfg.cache_frames * cfg.block_size, cfg.heads, cfg.head_dim)
            self.local = [AttentionCache(torch.zeros(shape), torch.zeros(shape)) for _ in range(cfg.num_layers)]
            self.pools = {
                f"layer{i}.{n}": getattr(c, a)
                for i, c in enumerate(self.local)
                for n, a in (("k", "key"), ("v", "value"))
            }
        else:
            flat = (cfg.num_slots, cfg.heads, cfg.head_dim)
            if layout == "paged":  # vLLM-Omni's allocation: each pool a base of its own
                kv = [(torch.zeros(flat), torch.zeros(flat)) for _ in range(cfg.num_layers)]
            else:  # K and V as the two halves of one allocation
                kv = [tuple(torch.zeros(2, *flat).unbind(0)) for _ in range(cfg.num_layers)]
            self.kv = kv
            self.pools = {f"layer{i}.{n}": t for i, pair in enumerate(kv) for n, t in zip("kv", pair, strict=True)}

    def reset(self) -> None:
        """Back to an empty request: zero storage, cursors at 0 (the Python-int state a rollout advances)."""
        for pool in self.pools.values():
            pool.zero_()
        for cache in getattr(self, "local", []):
            cache.end = cache.absolute_end = cache.sink_end = 0
            cache.last_start = None

    def for_chunk(self, chunk: int) -> list[Any]:
        """What each layer's block gets for ``chunk``: its request-local cache, or its paged inputs."""
        cfg = self.cfg
        if self.layout in ("split", "stale"):
            return list(self.local)
        first = 1 + chunk * cfg.chunk_frames  # block 0 is the null block
        blocks = torch.arange(1, first + cfg.chunk_frames)
        slots = torch.arange(first * cfg.block_size, (first + cfg.chunk_frames) * cfg.block_size)
        seq_lens = torch.tensor([blocks.numel() * cfg.block_size])
        return [
            PagedLayerInputs(torch.tensor(i), k, v, cfg.block_size, slots, blocks.unsqueeze(0), seq_lens)
            for i, (k, v) in enumerate(self.kv)
        ]


def rollout(
    cfg: LingBotConfig, caches: Caches, noise: torch.Tensor, steps: int = 2
) -> Callable[[Callable[..., Any]], torch.Tensor]:
    """The host loop: each chunk denoised over ``steps`` forwards, then committed.

    ``stale``: the denoising forwards only read the cache (``update_cache=False``, LingBot's probe
    step); the commit forward writes it. The other layouts commit on every forward.
    """

    def drive(model: Callable[..., Any]) -> torch.Tensor:
        outs = []
        for chunk in range(cfg.num_chunks):
            x, start = noise[chunk : chunk + 1], chunk * cfg.chunk_tokens
            for step in range(steps):
                t = torch.tensor([1.0 - step / steps])
                commit = caches.layout != "stale" or step == steps - 1
                x = model(x, t, caches.for_chunk(chunk), current_start=start, update_cache=commit)
            outs.append(x)
        return torch.cat(outs)

    return drive
