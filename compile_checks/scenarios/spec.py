"""``Scenario``: the shape of one built-in engine (layout, attention, commit order, dtype, sizes).

A scenario is pure data; :mod:`compile_checks.scenarios.cases` turns it into a
:class:`compile_checks.case.Case` (model, pools, host loop) that ``run_case`` checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# How the pools reach the compiled region (see compile_checks.scenarios.layouts).
LAYOUTS: tuple[str, ...] = ("split", "fused", "fused_kv", "list", "module_attr", "cross_layer", "cross_layer_kv")
# "einsum": attention written in ATen ops inside the region.
# "custom_op": one opaque custom op returning ONE tensor (how engines wrap attention kernels).
ATTENTIONS: tuple[str, ...] = ("einsum", "custom_op")
# Where a layer writes its chunk K/V into the pools:
# "last": after the MLP, the layer's last op (written on the chunk's last denoising step).
# "after_attention": right after attention, before the output projection and MLP (last step only).
# "before_attention": write first, then gather the window *including* the chunk (every step,
#   vLLM's reshape-and-cache-then-attend and Self-Forcing's order); the last step's write is the commit.
COMMIT_ORDERS: tuple[str, ...] = ("last", "after_attention", "before_attention")
# "paged_write": the ar_paging custom op (auto_functionalized, re-inplaced by Inductor).
# "index_put": plain ATen ``k[slots] = new_k; v[slots] = new_v``.
COMMIT_OPS: tuple[str, ...] = ("paged_write", "index_put")


def _check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise ValueError(f"Scenario.{name} must be one of {choices}, got {value!r}")


@dataclass(frozen=True)
class Scenario:
    """One engine shape; every field has the value of the plain ``split`` engine by default."""

    name: str
    layout: str = "split"
    num_layers: int = 2
    layers_per_region: int = 1
    dtype: torch.dtype = torch.float32
    num_blocks: int = 64
    block_size: int = 16
    num_kv_heads: int = 2
    head_dim: int = 32
    chunk_size: int = 16  # tokens per chunk (multiple of block_size)
    denoise_steps: int = 3
    num_chunks: int = 3
    window_chunks: int = 2
    sink_chunks: int = 1
    batch: int = 1
    dynamic: bool = False
    # "v1" | "v2" | None: None takes the pipeline's (stock: v2, vllm: v1)
    functionalization: str | None = None
    read_after_write: bool = False
    attention: str = "einsum"
    commit_order: str = "last"
    commit_op: str = "paged_write"
    # evict in the region: zero the slots of the blocks the window just dropped (an ATen
    # ``k[evicted] = 0`` that Inductor re-inplaces) before the window gather and the commit
    evict_in_region: bool = False
    expect_clean: bool = True
    description: str = ""
    # extra torch._inductor.config patches for this scenario, e.g. (("reorder_for_locality", False),)
    inductor_config: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        _check_choice("layout", self.layout, LAYOUTS)
        _check_choice("functionalization", self.functionalization, ("v1", "v2", None))
        _check_choice("attention", self.attention, ATTENTIONS)
        _check_choice("commit_order", self.commit_order, COMMIT_ORDERS)
        _check_choice("commit_op", self.commit_op, COMMIT_OPS)
        if self.num_layers % self.layers_per_region:
            raise ValueError(
                f"num_layers ({self.num_layers}) must be a multiple of layers_per_region ({self.layers_per_region})"
            )
        if self.chunk_size % self.block_size:
            raise ValueError(f"chunk_size ({self.chunk_size}) must be a multiple of block_size ({self.block_size})")
        if self.read_after_write and self.commit_order != "last":
            raise ValueError("read_after_write reads the commit back after the MLP: it needs commit_order='last'")

    @property
    def hidden(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def window_capacity(self) -> int:
        """Resident tokens at most (sink + window chunks): the padded gather size."""
        return (self.sink_chunks + self.window_chunks) * self.chunk_size

    @property
    def num_regions_per_step(self) -> int:
        return self.num_layers // self.layers_per_region

    @property
    def token_bytes(self) -> int:
        """K (or V) of one token of one layer."""
        return self.num_kv_heads * self.head_dim * self.dtype.itemsize

    @property
    def pool_bytes(self) -> int:
        """One K (or V) pool of one layer."""
        return self.num_slots * self.token_bytes

    @property
    def total_pool_bytes(self) -> int:
        """All layers, K and V."""
        return 2 * self.num_layers * self.pool_bytes

    def resident_chunks(self, chunk: int) -> int:
        """Chunks resident while ``chunk`` is denoised: the sink chunks and the last ``window_chunks``."""
        return min(chunk, self.sink_chunks + self.window_chunks)

    @property
    def ideal_read_bytes(self) -> int:
        """The resident window's K/V, all layers and steps of the run (padding not counted)."""
        tokens = sum(self.resident_chunks(c) for c in range(self.num_chunks)) * self.chunk_size
        return 2 * self.num_layers * self.batch * self.denoise_steps * tokens * self.token_bytes

    @property
    def ideal_write_bytes(self) -> int:
        """Every layer's chunk K/V, once per chunk."""
        return 2 * self.num_layers * self.batch * self.num_chunks * self.chunk_size * self.token_bytes

    @property
    def num_region_calls(self) -> int:
        return self.num_chunks * self.denoise_steps * self.num_regions_per_step

    @property
    def ideal_bytes_per_call(self) -> int:
        """Ideal pool traffic of the run divided by its compiled-region calls (``Case.ideal_bytes_per_call``)."""
        return (self.ideal_read_bytes + self.ideal_write_bytes) // self.num_region_calls


__all__ = ["ATTENTIONS", "COMMIT_OPS", "COMMIT_ORDERS", "LAYOUTS", "Scenario"]
