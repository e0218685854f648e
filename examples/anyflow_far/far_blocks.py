"""AnyFlow FAR's chunk loop at toy size, pure torch: the cache writes of diffusers 0.42.1, as its code does them.

diffusers' ``AnyFlowCausalAttnProcessor`` keeps, per layer, a ``{"full_cache", "compressed_cache"}`` dict of
``(2, B, H, L, D)`` tensors (K and V as the two halves of one allocation). Its *cache step* re-encodes the
clean chunks so far and writes K and V by plain slice assignment, four statements, verbatim::

    kv_cache["compressed_cache"][0, :, :, : kv_cache_flag["num_compressed_tokens"], :] = key[...]
    kv_cache["compressed_cache"][1, :, :, : kv_cache_flag["num_compressed_tokens"], :] = value[...]
    kv_cache["full_cache"][0, :, :, : kv_cache_flag["num_full_tokens"], :] = key[...]
    kv_cache["full_cache"][1, :, :, : kv_cache_flag["num_full_tokens"], :] = value[...]

Its denoising steps read the caches (``torch.cat`` of both caches' prefixes and the chunk's K / V). The
pipeline compiles each block (``compile_repeated_blocks``: ``block.compile(...)``, dynamo's default
``dynamic=None``), and passes ``copy.deepcopy(kv_cache_flag)``, whose Python ints dynamo specializes on.

- ``write="diffusers"``: the four statements above. The V write reads the K write's result, so only the V
  write's result is copied back into the cache: Inductor keeps the K write functional, a copy of the whole
  allocation per cache and per block call (cause ``chained_writes``). While fewer chunks than the compressed
  window are cached, ``num_compressed_tokens`` is 0: ``compressed_cache`` is written ``[:0]`` (nothing), and
  still copied whole.
- ``write="one_write"``: the fix. K and V written by one assignment of both halves (``torch.stack``), and a
  write of no tokens skipped in Python: nothing is copied.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

WRITES = ("diffusers", "one_write")


@dataclass(frozen=True)
class FarConfig:
    """2 blocks, 2 heads of 8, chunks of 8 full-resolution tokens (2 compressed); the compressed window holds
    chunks beyond ``full_chunk_limit - 1``."""

    num_layers: int = 2
    heads: int = 2
    head_dim: int = 8
    batch: int = 1
    full_tokens_per_chunk: int = 8
    compressed_tokens_per_chunk: int = 2
    chunks: int = 3
    full_chunk_limit: int = 3
    steps: int = 2

    @property
    def dim(self) -> int:
        return self.heads * self.head_dim

    def cache_shapes(self) -> dict[str, tuple[int, ...]]:
        full = self.full_chunk_limit * self.full_tokens_per_chunk
        compressed = (self.chunks - self.full_chunk_limit + 1) * self.compressed_tokens_per_chunk
        return {
            "full_cache": (2, self.batch, self.heads, full, self.head_dim),
            "compressed_cache": (2, self.batch, self.heads, max(compressed, 1), self.head_dim),
        }


def allocate_caches(cfg: FarConfig) -> dict[int, dict[str, torch.Tensor]]:
    """The pipeline's ``kv_cache``: per layer, ``full_cache`` and ``compressed_cache`` of ``(2, B, H, L, D)``."""
    return {i: {n: torch.zeros(s) for n, s in cfg.cache_shapes().items()} for i in range(cfg.num_layers)}


def pools_of(caches: dict[int, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {f"layer{i}.{n}": t for i, layer in caches.items() for n, t in layer.items()}


def write_diffusers(kv_cache: dict[str, torch.Tensor], flag: dict, key: torch.Tensor, value: torch.Tensor) -> None:
    """diffusers 0.42.1's cache step, verbatim (transformer_anyflow_far.py, AnyFlowCausalAttnProcessor)."""
    kv_cache["compressed_cache"][0, :, :, : flag["num_compressed_tokens"], :] = key[
        :, :, : flag["num_compressed_tokens"]
    ]
    kv_cache["compressed_cache"][1, :, :, : flag["num_compressed_tokens"], :] = value[
        :, :, : flag["num_compressed_tokens"]
    ]
    kv_cache["full_cache"][0, :, :, : flag["num_full_tokens"], :] = key[:, :, flag["num_compressed_tokens"] :]
    kv_cache["full_cache"][1, :, :, : flag["num_full_tokens"], :] = value[:, :, flag["num_compressed_tokens"] :]


def write_one(kv_cache: dict[str, torch.Tensor], flag: dict, key: torch.Tensor, value: torch.Tensor) -> None:
    """The fix: each cache written once (K and V stacked), a write of no tokens skipped (``n`` is a Python int)."""
    nc, nf = flag["num_compressed_tokens"], flag["num_full_tokens"]
    if nc:
        kv_cache["compressed_cache"][:, :, :, :nc] = torch.stack([key[:, :, :nc], value[:, :, :nc]])
    if nf:
        kv_cache["full_cache"][:, :, :, :nf] = torch.stack([key[:, :, nc:], value[:, :, nc:]])


class FarBlock(nn.Module):
    """One transformer block's causal self-attention with FAR's two caches (the processor's cache paths)."""

    def __init__(self, cfg: FarConfig, write: str) -> None:
        super().__init__()
        if write not in WRITES:
            raise ValueError(f"write must be one of {WRITES}, got {write!r}")
        self.cfg, self.write = cfg, write
        self.to_q, self.to_k, self.to_v = (nn.Linear(cfg.dim, cfg.dim) for _ in range(3))
        self.to_out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, hidden: torch.Tensor, kv_cache: dict[str, torch.Tensor], kv_cache_flag: dict) -> torch.Tensor:
        heads = self.cfg.heads
        query = self.to_q(hidden).unflatten(2, (heads, -1)).transpose(1, 2)
        key = self.to_k(hidden).unflatten(2, (heads, -1)).transpose(1, 2)
        value = self.to_v(hidden).unflatten(2, (heads, -1)).transpose(1, 2)
        if kv_cache_flag["is_cache_step"]:
            (write_diffusers if self.write == "diffusers" else write_one)(kv_cache, kv_cache_flag, key, value)
        else:
            nc, nf = kv_cache_flag["num_cached_compressed_tokens"], kv_cache_flag["num_cached_full_tokens"]
            key = torch.cat([kv_cache["compressed_cache"][0, :, :, :nc], kv_cache["full_cache"][0, :, :, :nf], key], 2)
            value = torch.cat(
                [kv_cache["compressed_cache"][1, :, :, :nc], kv_cache["full_cache"][1, :, :, :nf], value], 2
            )
        out = F.scaled_dot_product_attention(query, key, value)
        return hidden + self.to_out(out.transpose(1, 2).flatten(2))


class FarModel(nn.Module):
    """The blocks; ``compile_repeated_blocks`` compiles each of them, not the model."""

    def __init__(self, cfg: FarConfig, write: str = "diffusers") -> None:
        super().__init__()
        self.blocks = nn.ModuleList(FarBlock(cfg, write) for _ in range(cfg.num_layers))

    def forward(self, hidden: torch.Tensor, kv_cache: dict, kv_cache_flag: dict) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            hidden = block(hidden, kv_cache[i], kv_cache_flag)
        return hidden


def compile_repeated_blocks(model: FarModel, backend: object, dynamic: bool | None = None) -> FarModel:
    """diffusers' ``ModelMixin.compile_repeated_blocks(**kwargs)``: ``block.compile(**kwargs)`` per block."""
    for block in model.blocks:
        block.compile(backend=backend, dynamic=dynamic)
    return model


def build_model(cfg: FarConfig, write: str) -> FarModel:
    torch.manual_seed(0)
    return FarModel(cfg, write).eval().requires_grad_(False)


def rollout(cfg: FarConfig, caches: dict[int, dict[str, torch.Tensor]], noise: torch.Tensor):  # type: ignore[no-untyped-def]
    """The pipeline's chunk loop: denoising steps that read the caches, then a cache step over the chunks so far."""

    def drive(model: FarModel) -> torch.Tensor:
        flag: dict = {"num_cached_chunks": 0, "is_cache_step": False}
        out = torch.zeros_like(noise)
        per = cfg.full_tokens_per_chunk
        for chunk in range(cfg.chunks):
            total = chunk + 1  # the chunks so far, this one included
            compressed_chunks = max(0, total - (cfg.full_chunk_limit - 1))
            cached_compressed = max(0, chunk - (cfg.full_chunk_limit - 1))
            step_flag = {
                **flag,
                "num_cached_compressed_tokens": cached_compressed * cfg.compressed_tokens_per_chunk,
                "num_cached_full_tokens": (chunk - cached_compressed) * per,
            }
            x = noise[:, chunk * per : total * per]
            for _ in range(cfg.steps):
                x = x - 0.1 * model(x, caches, copy.deepcopy(step_flag))
            out[:, chunk * per : total * per] = x
            cache_flag = {
                **flag,
                "is_cache_step": True,
                "num_compressed_tokens": compressed_chunks * cfg.compressed_tokens_per_chunk,
                "num_full_tokens": (total - compressed_chunks) * per,
            }
            seen = out[:, compressed_chunks * per : total * per]
            compressed = out[:, : compressed_chunks * per : per // cfg.compressed_tokens_per_chunk]
            model(torch.cat([compressed, seen], 1), caches, copy.deepcopy(cache_flag))
            flag["num_cached_chunks"] += 1
        return out

    return drive
