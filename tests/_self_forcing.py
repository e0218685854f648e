"""A Self-Forcing-style causal attention stack (``CausalWanSelfAttention``'s inference branch), for the
robustness tests: RoPE from ``grid_sizes.tolist()``, QK RMS-norm, a ``kv_cache`` dict per layer whose
``local_end_index`` / ``global_end_index`` are read with ``.item()`` (graph breaks: each leaves small
regions behind, some of them no-op graphs such as ``x.type_as(v); return``), the chunk written into
the cache with slice assignment, then the window read back for SDPA.

``layout="split"``: one K and one V tensor per layer (clean). ``layout="fused"``: each layer's K and V
are ``kv[0]`` / ``kv[1]`` of one ``(2, B, S, H, D)`` allocation, and the window is gathered before
the write: Inductor keeps a copy of the cache (the negative control).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from compile_checks import Case


def rope_params(max_seq_len: int, dim: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = torch.outer(
        torch.arange(max_seq_len), 1.0 / torch.pow(theta, torch.arange(0, dim, 2).to(torch.float64).div(dim))
    )
    return torch.polar(torch.ones_like(freqs), freqs)


def causal_rope_apply(x: torch.Tensor, grid_sizes: torch.Tensor, freqs: torch.Tensor, start_frame: int = 0):
    n, c = x.size(2), x.size(3) // 2
    parts = freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
    output = []
    for i, (f, h, w) in enumerate(grid_sizes.tolist()):
        seq_len = f * h * w
        x_i = torch.view_as_complex(x[i, :seq_len].to(torch.float64).reshape(seq_len, n, -1, 2))
        freqs_i = torch.cat(
            [
                parts[0][start_frame : start_frame + f].view(f, 1, 1, -1).expand(f, h, w, -1),
                parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
                parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1),
            ],
            dim=-1,
        ).reshape(seq_len, 1, -1)
        x_i = torch.view_as_real(x_i * freqs_i).flatten(2)
        output.append(torch.cat([x_i, x[i, seq_len:]]))
    return torch.stack(output).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)).type_as(
            x
        ) * self.weight


class CausalSelfAttention(nn.Module):
    """The inference branch of Self-Forcing's ``CausalWanSelfAttention`` (no sliding window), with SDPA."""

    def __init__(self, dim: int, num_heads: int, gather_first: bool = False) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.max_attention_size = 32760
        self.gather_first = gather_first
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm_q, self.norm_k = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, grid_sizes, freqs, kv_cache: dict[str, torch.Tensor], current_start: int = 0):
        b, s, n, d = *x.shape[:2], self.num_heads, self.head_dim
        q = self.norm_q(self.q(x)).view(b, s, n, d)
        k = self.norm_k(self.k(x)).view(b, s, n, d)
        v = self.v(x).view(b, s, n, d)
        frame_seqlen = math.prod(grid_sizes[0][1:]).item()
        current_start_frame = current_start // frame_seqlen
        roped_query = causal_rope_apply(q, grid_sizes, freqs, start_frame=current_start_frame).type_as(v)
        roped_key = causal_rope_apply(k, grid_sizes, freqs, start_frame=current_start_frame).type_as(v)
        current_end = current_start + roped_query.shape[1]
        kv_cache_size = kv_cache["k"].shape[1]
        num_new_tokens = roped_query.shape[1]
        local_end_index = kv_cache["local_end_index"].item() + current_end - kv_cache["global_end_index"].item()
        local_end_index = max(0, min(local_end_index, kv_cache_size))
        local_start_index = max(0, local_end_index - num_new_tokens)
        window = slice(max(0, local_end_index - self.max_attention_size), local_end_index)
        if self.gather_first:  # the bug: the window read before the commit keeps the old cache alive
            old_k, old_v = kv_cache["k"][:, window] * 1, kv_cache["v"][:, window] * 1
        kv_cache["k"][:, local_start_index:local_end_index] = roped_key
        kv_cache["v"][:, local_start_index:local_end_index] = v
        cached_k, cached_v = kv_cache["k"][:, window], kv_cache["v"][:, window]
        if self.gather_first:
            cached_k, cached_v = cached_k + 0 * old_k, cached_v + 0 * old_v
        out = F.scaled_dot_product_attention(
            roped_query.transpose(1, 2), cached_k.transpose(1, 2), cached_v.transpose(1, 2)
        ).transpose(1, 2)
        kv_cache["global_end_index"].fill_(current_end)
        kv_cache["local_end_index"].fill_(local_end_index)
        return self.o(out.flatten(2))


class SelfForcingStack(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, gather_first: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(CausalSelfAttention(dim, heads, gather_first) for _ in range(layers))
        d = dim // heads
        self.register_buffer(
            "freqs",
            torch.cat(
                [rope_params(64, d - 4 * (d // 6)), rope_params(64, 2 * (d // 6)), rope_params(64, 2 * (d // 6))], 1
            ),
            persistent=False,
        )

    def forward(self, x, grid_sizes, kv_caches: list[dict[str, torch.Tensor]], current_start: int):
        for block, cache in zip(self.blocks, kv_caches, strict=True):
            x = x + block(x, grid_sizes, self.freqs, cache, current_start)
        return x


def caches(layers: int, tokens: int, heads: int, head_dim: int, fused: bool) -> list[dict[str, torch.Tensor]]:
    out = []
    for _ in range(layers):
        if fused:
            kv = torch.zeros(2, 1, tokens, heads, head_dim)
            k, v = kv[0], kv[1]
        else:
            k, v = torch.zeros(1, tokens, heads, head_dim), torch.zeros(1, tokens, heads, head_dim)
        out.append({"k": k, "v": v, "global_end_index": torch.tensor([0]), "local_end_index": torch.tensor([0])})
    return out


def self_forcing_case(
    name: str = "self_forcing", layout: str = "split", layers: int = 2, chunks: int = 2, **case: Any
) -> Case:
    """The stack's host loop: ``chunks`` chunks of one frame (2x2 tokens), each committed then attended."""
    torch.manual_seed(0)
    dim, heads, frame = 16, 2, (1, 2, 2)
    tokens = math.prod(frame)
    fused = layout == "fused"
    model = SelfForcingStack(layers, dim, heads, gather_first=fused).eval().requires_grad_(False)
    kv = caches(layers, tokens * chunks, heads, dim // heads, fused)
    x = torch.randn(1, tokens, dim)
    grid = torch.tensor([frame])

    def driver(step):
        out = x
        for c in range(chunks):
            out = step(x, grid, kv, c * tokens)
        return out

    pools = {f"layer{i}.{n}": cache[n] for i, cache in enumerate(kv) for n in ("k", "v")}
    case.setdefault("expect_clean", not fused)
    return Case(name, model, driver=driver, pools=pools, **case)


def cases() -> list[Case]:
    """A TARGET: the clean stack and its cloning twin (the negative control)."""
    return [self_forcing_case("self_forcing"), self_forcing_case("self_forcing_fused", layout="fused")]


def static_cases() -> list[Case]:
    """:func:`cases` with static shapes. A full compile's truth is the generated code: under torch.compile's
    default (``dynamic=None``) the recompiled block graphs are symbolic and Inductor's code for the fused
    twin allocates no cache-sized buffer, so a full compile of :func:`cases` is rightly clean; with static
    shapes the fused twin's copies are in the generated code and it stays a negative control."""
    return [c.replace(dynamic=False) for c in cases()]
