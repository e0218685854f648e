"""Per-layer paged K/V pools plus flat slot-write views.

Each cache keeps FlashAttention's block-table layout
``(num_blocks, block_size, num_kv_heads, head_dim)``; the flat views
``(num_blocks * block_size, num_kv_heads, head_dim)`` share its storage so a
commit writes ``pool[slot]`` directly.

K and V are two separate allocations, never the halves of one ``(2, ...)``
tensor: when both mutated arguments of the paged-write op are views of one
storage, Inductor's reinplace pass cannot re-inplace both and a clone of the
whole pool survives in the compiled graph (one pool of traffic per compiled
region per denoising step). ``compile_checks`` gates exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PoolGeometry:
    """Shape of one layer's K (or V) pool."""

    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")

    @property
    def cache_shape(self) -> tuple[int, int, int, int]:
        return (self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)

    @property
    def flat_shape(self) -> tuple[int, int, int]:
        return (self.num_blocks * self.block_size, self.num_kv_heads, self.head_dim)

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size


def allocate_kv_pool_with_views(
    num_blocks: int,
    block_size: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str,
) -> tuple[list[list[torch.Tensor]], list[torch.Tensor], list[torch.Tensor]]:
    """Allocate ``num_layers`` split K/V pools (zeroed) and their flat views.

    Returns ``(kv_pools, k_pools, v_pools)``: ``kv_pools[layer] == [k_cache, v_cache]``
    in block-table layout; ``k_pools[layer]`` / ``v_pools[layer]`` are flat views of
    the same storage.
    """
    geometry = PoolGeometry(num_blocks, block_size, num_kv_heads, head_dim)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
    kv_pools: list[list[torch.Tensor]] = []
    k_pools: list[torch.Tensor] = []
    v_pools: list[torch.Tensor] = []
    for _ in range(num_layers):
        k = torch.zeros(geometry.cache_shape, dtype=dtype, device=device)
        v = torch.zeros(geometry.cache_shape, dtype=dtype, device=device)
        kv_pools.append([k, v])
        k_pools.append(k.view(geometry.flat_shape))
        v_pools.append(v.view(geometry.flat_shape))
    return kv_pools, k_pools, v_pools
