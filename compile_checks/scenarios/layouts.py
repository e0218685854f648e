"""Pool layouts: how one run's K/V pools are allocated and handed to the compiled region.

* ``split``: one ``(num_slots, H, D)`` allocation per pool, passed as tuples of tensors.
* ``fused``: one ``(2, num_slots, H, D)`` allocation per layer, ``kv[0]``/``kv[1]`` sliced on the
  host: two graph inputs aliasing one storage (the known negative control).
* ``fused_kv``: the same allocation passed whole, sliced inside the region (one graph input).
* ``list``: the pools in one mutable Python list ``[k0, v0, k1, v1, ...]``.
* ``module_attr``: the pools as ``nn.Module`` buffers, the weights as parameters.
* ``cross_layer``: one ``(num_layers, 2, num_slots, H, D)`` allocation for every layer (vLLM's
  cross-layer KV layout), ``big[layer, 0]``/``big[layer, 1]`` passed as in ``split``: with one
  layer per region, one compiled region is reused for every layer's views of one storage.
* ``cross_layer_kv``: the same allocation, ``big[layer]`` passed whole and sliced inside the region
  (as ``fused_kv``): one graph input per layer, one region reused for every layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from compile_checks.scenarios.model import WEIGHT_NAMES, Model, layer_forward

if TYPE_CHECKING:
    from compile_checks.scenarios.spec import Scenario


class PagedLayer(torch.nn.Module):
    """A layer owning its weights (parameters) and its K/V cache (buffers)."""

    def __init__(self, s: Scenario, w: dict[str, torch.Tensor], k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        super().__init__()
        self.scenario = s
        for n in WEIGHT_NAMES:
            self.register_parameter(n, torch.nn.Parameter(w[n], requires_grad=False))
        self.register_buffer("k_cache", k_cache, persistent=False)
        self.register_buffer("v_cache", v_cache, persistent=False)

    def forward(self, h, win_slots, win_bias, commit_slots, commit: bool, evict_slots=None):  # type: ignore[no-untyped-def]
        w = [getattr(self, n) for n in WEIGHT_NAMES]
        return layer_forward(
            self.scenario, h, w, self.k_cache, self.v_cache, win_slots, win_bias, commit_slots, commit, evict_slots
        )


class PagedRegion(torch.nn.Module):
    """``layers_per_region`` PagedLayers: the compiled unit of the module_attr layout."""

    def __init__(self, layers: list[PagedLayer]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, h, win_slots, win_bias, commit_slots, commit: bool, evict_slots=None):  # type: ignore[no-untyped-def]
        for layer in self.layers:
            h = layer(h, win_slots, win_bias, commit_slots, commit, evict_slots)
        return h


def build_model(s: Scenario, weights: list[dict[str, torch.Tensor]]) -> Model:
    """Zeroed pools in the scenario's layout, and what each region receives for them."""
    flat = (s.num_slots, s.num_kv_heads, s.head_dim)
    kvs: list[torch.Tensor] = []
    if s.layout in ("cross_layer", "cross_layer_kv"):
        big = torch.zeros((s.num_layers, 2, *flat), dtype=s.dtype)
        kvs = [big[i] for i in range(s.num_layers)]
        k_pools, v_pools = [kv[0] for kv in kvs], [kv[1] for kv in kvs]
    elif s.layout in ("fused", "fused_kv"):
        kvs = [torch.zeros((2, *flat), dtype=s.dtype) for _ in range(s.num_layers)]
        k_pools, v_pools = [kv[0] for kv in kvs], [kv[1] for kv in kvs]
    else:
        k_pools = [torch.zeros(flat, dtype=s.dtype) for _ in range(s.num_layers)]
        v_pools = [torch.zeros(flat, dtype=s.dtype) for _ in range(s.num_layers)]
    lpr = s.layers_per_region
    holders: list[Any] = []
    for r in range(s.num_regions_per_step):
        lo, hi = r * lpr, (r + 1) * lpr
        if s.layout in ("fused_kv", "cross_layer_kv"):
            holders.append(tuple(kvs[lo:hi]))
        elif s.layout == "list":
            holders.append([p for i in range(lo, hi) for p in (k_pools[i], v_pools[i])])
        elif s.layout == "module_attr":
            holders.append(PagedRegion([PagedLayer(s, weights[i], k_pools[i], v_pools[i]) for i in range(lo, hi)]))
        else:  # split / fused / cross_layer: region_args slices k_pools / v_pools
            holders.append(None)
    return Model(s, weights, k_pools, v_pools, holders)


__all__ = ["PagedLayer", "PagedRegion", "build_model"]
