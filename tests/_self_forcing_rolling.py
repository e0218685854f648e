"""A Self-Forcing-style causal attention with its ROLLING local window (``CausalWanSelfAttention``'s
inference branch with ``local_attn_size != -1``, no sink tokens), for the write check's regression test.

Each layer's ``kv_cache`` is a dict ``{"k": [B, L, H, D], "v": ..., "global_end_index": tensor([0]),
"local_end_index": tensor([0])}`` with ``L`` the window (2 chunks of one frame, 2x2 tokens). A chunk is
written at ``[local_start:local_end]``; once the window is full it first rolls (the newest ``L - n``
tokens copied to the front, ``.clone()`` as in the original) and then writes at the end. The index
tensors are read with ``.item()`` (graph breaks) and advanced in place with ``fill_``, so a second run
on unrestored state starts from the first run's indices (how the write check's eager reference used to
break the compiled run: ``expand: ... 12 -> 0``).

The roll keeps a real pool copy (see :func:`rolling_case`): the case expects copies, never a write finding.

``drop_roll=True`` (the negative control) makes the roll of each layer's K through an op declared pure
(``mutates_args=()``) whose size-0 result is unused: it runs eagerly, and AOT autograd drops it from the
compiled graph (a lost write).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from _self_forcing import RMSNorm, causal_rope_apply, rope_params
from torch import nn

from compile_checks import Case

DIM, HEADS, FRAME = 16, 2, (1, 2, 2)
TOKENS = math.prod(FRAME)  # one chunk: one frame
WINDOW_CHUNKS = 2


@torch.library.custom_op("sf_rolling_tests::hidden_roll", mutates_args=())
def hidden_roll(cache: torch.Tensor, evicted: int, rolled: int) -> torch.Tensor:
    """The roll of ``cache`` along dim 1, undeclared: the op claims to write nothing."""
    cache[:, :rolled].copy_(cache[:, evicted : evicted + rolled].clone())
    return cache.new_empty(0)


@hidden_roll.register_fake
def _(cache: torch.Tensor, evicted: int, rolled: int) -> torch.Tensor:
    return cache.new_empty(0)


class RollingSelfAttention(nn.Module):
    """Self-Forcing's causal attention over a local window of ``window`` tokens that rolls when full."""

    def __init__(self, dim: int, num_heads: int, window: int, drop_roll: bool = False) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.max_attention_size = window
        self.drop_roll = drop_roll
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
        global_end = kv_cache["global_end_index"].item()
        local_end = kv_cache["local_end_index"].item()
        if current_end > global_end and num_new_tokens + local_end > kv_cache_size:
            # the window is full: evict the oldest tokens, roll the rest to the front
            num_evicted_tokens = num_new_tokens + local_end - kv_cache_size
            num_rolled_tokens = local_end - num_evicted_tokens
            src = slice(num_evicted_tokens, num_evicted_tokens + num_rolled_tokens)
            if self.drop_roll:
                hidden_roll(kv_cache["k"], num_evicted_tokens, num_rolled_tokens)
            else:
                kv_cache["k"][:, :num_rolled_tokens] = kv_cache["k"][:, src].clone()
            kv_cache["v"][:, :num_rolled_tokens] = kv_cache["v"][:, src].clone()
            local_end_index = local_end + current_end - global_end - num_evicted_tokens
        else:
            local_end_index = local_end + current_end - global_end
        local_start_index = local_end_index - num_new_tokens
        kv_cache["k"][:, local_start_index:local_end_index] = roped_key
        kv_cache["v"][:, local_start_index:local_end_index] = v
        window = slice(max(0, local_end_index - self.max_attention_size), local_end_index)
        out = F.scaled_dot_product_attention(
            roped_query.transpose(1, 2),
            kv_cache["k"][:, window].transpose(1, 2),
            kv_cache["v"][:, window].transpose(1, 2),
        ).transpose(1, 2)
        kv_cache["global_end_index"].fill_(current_end)
        kv_cache["local_end_index"].fill_(local_end_index)
        return self.o(out.flatten(2))


class RollingStack(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, window: int, drop_roll: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(RollingSelfAttention(dim, heads, window, drop_roll) for _ in range(layers))
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


def caches(layers: int, tokens: int) -> list[dict[str, torch.Tensor]]:
    shape = (1, tokens, HEADS, DIM // HEADS)
    return [
        {
            "k": torch.zeros(shape),
            "v": torch.zeros(shape),
            "global_end_index": torch.tensor([0]),
            "local_end_index": torch.tensor([0]),
        }
        for _ in range(layers)
    ]


def rolling_case(
    name: str = "self_forcing_rolling", layers: int = 2, chunks: int = 4, drop_roll: bool = False, **case: Any
) -> Case:
    """The host loop: ``chunks`` chunks of one frame into a window of :data:`WINDOW_CHUNKS` chunks (with the
    default 4 chunks the window rolls twice); it returns every chunk's output. ``meta["kv"]`` holds the
    cache dicts.

    ``expect_clean`` defaults to False: the roll is a real pool copy. Inductor drops the ``.clone()`` of the
    rolled tokens, and the ``slice_scatter`` of a pool with a slice of itself is not reinplaced, so each
    rolling chunk copies every layer's K and V whole (the copy check's finding; the write check has none)."""
    torch.manual_seed(0)
    window = WINDOW_CHUNKS * TOKENS
    model = RollingStack(layers, DIM, HEADS, window, drop_roll).eval().requires_grad_(False)
    kv = caches(layers, window)
    x = torch.randn(1, TOKENS, DIM)
    grid = torch.tensor([FRAME])

    def driver(step):
        return torch.stack([step(x, grid, kv, c * TOKENS) for c in range(chunks)])

    pools = {f"layer{i}.{n}": cache[n] for i, cache in enumerate(kv) for n in ("k", "v")}
    case.setdefault("expect_clean", False)
    return Case(name, model, driver=driver, pools=pools, meta={"kv": kv}, **case)
