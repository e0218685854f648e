"""The scenario model: fixed seeded weights, one layer = window gather + attention + MLP (+ commit).

A layer attends with the chunk's queries over ``[resident window ; chunk]``. Where it
writes the chunk's K/V into the pools (``Scenario.commit_order``) and with which op
(``commit_op``), and whether attention is ATen ops or one custom op (``attention``),
are the knobs the scenarios turn: they decide whether Inductor keeps a pool copy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

import ar_paging  # noqa: F401 - registers torch.ops.ar_paging.paged_write
from ar_paging import gather_window

if TYPE_CHECKING:
    from compile_checks.scenarios.spec import Scenario

WEIGHT_NAMES: tuple[str, ...] = ("wq", "wk", "wv", "wo", "w1", "w2")


def make_weights(s: Scenario, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Per-layer projection / MLP weights (deterministic)."""
    g = torch.Generator().manual_seed(seed)
    h = s.hidden
    shapes = {"wq": (h, h), "wk": (h, h), "wv": (h, h), "wo": (h, h), "w1": (h, 2 * h), "w2": (2 * h, h)}
    return [
        {n: (torch.randn(shapes[n], generator=g) / math.sqrt(shapes[n][0])).to(s.dtype) for n in WEIGHT_NAMES}
        for _ in range(s.num_layers)
    ]


def _rms(h: torch.Tensor) -> torch.Tensor:
    """RMS norm (no weight): keeps the residual stream O(1) so compiled == eager is a tight check."""
    return (h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Softmax attention in fp32: q (B, T, H, D), k/v (B, S, H, D), bias (B, 1, 1, S) -> (B, T, H, D)."""
    scores = torch.einsum("bthd,bshd->bhts", q.float(), k.float()) / math.sqrt(q.shape[-1]) + bias
    return torch.einsum("bhts,bshd->bthd", scores.softmax(dim=-1), v.float()).to(q.dtype)


@torch.library.custom_op("compile_checks_scenarios::window_attention", mutates_args=())
def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Attention as an opaque op returning ONE tensor (as vLLM's attention op does); contiguous output."""
    return _attention(q, k, v, bias).contiguous()


@window_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return q.new_empty(q.shape)


def _commit(s: Scenario, k_pool, v_pool, k_new, v_new, slots) -> None:  # type: ignore[no-untyped-def]
    """Write the chunk's K/V (B, T, H, D) into the flat pools at ``slots`` (B, T)."""
    if s.commit_op == "paged_write":
        torch.ops.ar_paging.paged_write(k_pool, v_pool, k_new, v_new, slots)
        return
    # plain ATen: functionalization turns these into index_put + a copy back into the pool
    flat = slots.reshape(-1)
    k_pool[flat] = k_new.reshape(-1, *k_new.shape[2:])
    v_pool[flat] = v_new.reshape(-1, *v_new.shape[2:])


def layer_forward(  # type: ignore[no-untyped-def]
    s: Scenario,
    h,
    w: Sequence[torch.Tensor],
    k_pool,
    v_pool,
    win_slots,
    win_bias,
    commit_slots,
    commit: bool,
    evict_slots=None,
) -> torch.Tensor:
    """One causal DiT layer on a chunk.

    h: (B, T, hidden); win_slots: (B, W) long; win_bias: (B, 1, 1, W + T) float32 (0 resident,
    -inf padding); commit_slots: (B, T) long; pools flat (num_slots, H, D).
    """
    wq, wk, wv, wo, w1, w2 = w
    if evict_slots is not None:
        # the AR loop's eviction in the same region: zero what the window dropped (padded with
        # slot 0, the null block, which only masked padding reads)
        flat_evicted = evict_slots.reshape(-1)
        k_pool[flat_evicted] = 0
        v_pool[flat_evicted] = 0
    b, t, hidden = h.shape
    heads, dim = k_pool.shape[1], k_pool.shape[2]
    x = _rms(h)
    q = (x @ wq).view(b, t, heads, dim)
    k_new = (x @ wk).view(b, t, heads, dim)
    v_new = (x @ wv).view(b, t, heads, dim)
    if s.commit_order == "before_attention":
        # write the chunk first, then read window + chunk back from the pool: nothing reads the
        # pool's old contents after the write, so the write can always happen in place
        _commit(s, k_pool, v_pool, k_new, v_new, commit_slots)
        k_all, v_all = gather_window(k_pool, v_pool, torch.cat([win_slots, commit_slots], dim=1).reshape(-1))
        k_all, v_all = k_all.view(b, -1, heads, dim), v_all.view(b, -1, heads, dim)
    else:
        k_win, v_win = gather_window(k_pool, v_pool, win_slots.reshape(-1))
        k_all = torch.cat([k_win.view(b, -1, heads, dim), k_new], dim=1)
        v_all = torch.cat([v_win.view(b, -1, heads, dim), v_new], dim=1)
    if s.attention == "custom_op":
        attn = torch.ops.compile_checks_scenarios.window_attention(q, k_all, v_all, win_bias)
    else:
        attn = _attention(q, k_all, v_all, win_bias)
    if commit and s.commit_order == "after_attention":
        _commit(s, k_pool, v_pool, k_new, v_new, commit_slots)
    h = h + attn.reshape(b, t, hidden) @ wo
    h = h + torch.nn.functional.gelu(_rms(h) @ w1) @ w2
    if commit and s.commit_order == "last":
        _commit(s, k_pool, v_pool, k_new, v_new, commit_slots)
        if s.read_after_write:
            # read the just-committed K back from the pool in the same region
            k_back = k_pool.index_select(0, commit_slots.reshape(-1)).view(b, t, hidden)
            h = h + 1e-3 * k_back
    return h


# region functions, one per layout: each runs `layers_per_region` layers ------------------------


def region_function(s: Scenario) -> Callable[..., torch.Tensor]:
    """The compiled unit for ``s.layout``; the scenario is a closure constant (dynamo guards on it)."""

    def region_split(h, weights, k_pools, v_pools, win_slots, win_bias, commit_slots, commit, evict_slots=None):  # type: ignore[no-untyped-def]
        """K and V of each layer passed as separate arguments (tuples).

        Used by "split" (two allocations) and "fused" (``kv[0]``, ``kv[1]`` sliced on the host from
        one ``(2, num_slots, H, D)`` allocation: two graph inputs aliasing one storage).
        """
        for w, k, v in zip(weights, k_pools, v_pools):
            h = layer_forward(s, h, w, k, v, win_slots, win_bias, commit_slots, commit, evict_slots)
        return h

    def region_fused_kv(h, weights, kv_pools, win_slots, win_bias, commit_slots, commit, evict_slots=None):  # type: ignore[no-untyped-def]
        """The whole (2, num_slots, H, D) tensor is the input; k, v = kv[0], kv[1] inside the region."""
        for w, kv in zip(weights, kv_pools):
            h = layer_forward(s, h, w, kv[0], kv[1], win_slots, win_bias, commit_slots, commit, evict_slots)
        return h

    def region_list(h, weights, pools, win_slots, win_bias, commit_slots, commit, evict_slots=None):  # type: ignore[no-untyped-def]
        """Pools in one mutable Python list [k0, v0, k1, v1, ...], indexed inside the region."""
        for i, w in enumerate(weights):
            h = layer_forward(
                s, h, w, pools[2 * i], pools[2 * i + 1], win_slots, win_bias, commit_slots, commit, evict_slots
            )
        return h

    def region_module(module, h, win_slots, win_bias, commit_slots, commit, evict_slots=None):  # type: ignore[no-untyped-def]
        """Pools held as module buffers; the module is an argument of the compiled function."""
        return module(h, win_slots, win_bias, commit_slots, commit, evict_slots)

    fn = {
        "split": region_split,
        "fused": region_split,
        "fused_kv": region_fused_kv,
        "list": region_list,
        "module_attr": region_module,
        "cross_layer": region_split,
        "cross_layer_kv": region_fused_kv,
    }[s.layout]
    fn.__qualname__ = fn.__name__  # error messages and dumps name "region_split", not "<locals>"
    return fn  # type: ignore[no-any-return, return-value]


@dataclass
class Model:
    """Pools + weights of one run, and how to call region ``r`` in that layout.

    ``holders[r]`` is what region ``r`` receives for its pools (a tuple of kv tensors, a
    list, a module), None where the pools are passed as tuples; see ``layouts.build_model``.
    """

    scenario: Scenario
    weights: list[dict[str, torch.Tensor]]
    k_pools: list[torch.Tensor]  # flat (num_slots, H, D) views, one per layer
    v_pools: list[torch.Tensor]
    holders: list[Any]

    def named_pools(self) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for i, (k, v) in enumerate(zip(self.k_pools, self.v_pools)):
            out[f"layer{i}.k"] = k
            out[f"layer{i}.v"] = v
        return out

    def region_fn(self) -> Callable[..., torch.Tensor]:
        return region_function(self.scenario)

    def region_args(  # type: ignore[no-untyped-def]
        self, r: int, h: torch.Tensor, win_slots, win_bias, commit_slots, commit: bool, evict_slots=None
    ) -> tuple:
        """Region ``r``'s arguments; ``evict_slots`` only when the scenario evicts in the region."""
        s = self.scenario
        evict = (evict_slots,) if s.evict_in_region else ()
        if s.layout == "module_attr":
            return (self.holders[r], h, win_slots, win_bias, commit_slots, commit, *evict)
        lo, hi = r * s.layers_per_region, (r + 1) * s.layers_per_region
        ws = tuple(tuple(self.weights[i][n] for n in WEIGHT_NAMES) for i in range(lo, hi))
        if s.layout in ("split", "fused", "cross_layer"):
            pools: tuple[Any, ...] = (tuple(self.k_pools[lo:hi]), tuple(self.v_pools[lo:hi]))
        else:
            pools = (self.holders[r],)
        return (h, ws, *pools, win_slots, win_bias, commit_slots, commit, *evict)


__all__ = ["WEIGHT_NAMES", "Model", "layer_forward", "make_weights", "region_function", "window_attention"]
