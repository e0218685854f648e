"""The built-in scenarios, the default gate and the full-compile smoke set."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from compile_checks.scenarios.spec import Scenario

# 4 chunks with a 1-chunk window + 1 sink chunk: chunk 3 evicts chunk 1 (null block in its table)
_BASE: dict[str, Any] = {"num_chunks": 4, "window_chunks": 1, "sink_chunks": 1}
_NO_REORDER: tuple[tuple[str, Any], ...] = (("reorder_for_locality", False),)


def _s(name: str, description: str, **kw: Any) -> Scenario:
    return Scenario(name=name, description=description, **{**_BASE, **kw})


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _s("split", "separate K and V allocations per layer, static shapes, the pipeline's functionalization"),
        _s(
            "fused",
            "NEGATIVE CONTROL: K, V = kv[0], kv[1] of one (2, N, H, D) allocation; reinplace keeps a "
            "clone of the whole 2-pool storage for v_pool",
            layout="fused",
            expect_clean=False,
        ),
        _s(
            "fused_v1",
            "NEGATIVE CONTROL: fused layout under auto_functionalized v1 (vLLM's setting)",
            layout="fused",
            functionalization="v1",
            expect_clean=False,
        ),
        _s(
            "fused_kv",
            "one (2, N, H, D) allocation passed whole; k, v = kv[0], kv[1] inside the region (one graph "
            "input): re-inplaced under auto_functionalized_v2 only (see fused_kv_v1)",
            layout="fused_kv",
            functionalization="v2",
        ),
        _s(
            "fused_kv_v1",
            "NEGATIVE CONTROL: fused_kv under auto_functionalized v1 (vLLM's setting): K and V of every "
            "layer are cloned",
            layout="fused_kv",
            functionalization="v1",
            expect_clean=False,
        ),
        _s(
            "split_v1",
            "split layout under auto_functionalized v1 (enable_auto_functionalized_v2=False)",
            functionalization="v1",
        ),
        _s("list", "pools passed as one mutable Python list [k0, v0, ...] indexed in the region", layout="list"),
        _s(
            "module_attr",
            "pools held as nn.Module buffers of per-layer modules, weights as parameters",
            layout="module_attr",
        ),
        _s(
            "read_after_write",
            "NEGATIVE CONTROL: the commit region reads the just-written K back from the pool. Inductor's "
            "reorder_for_locality moves the commit above the window gathers, so reinplace sees later reads "
            "of both pools and keeps a clone of K and of V",
            read_after_write=True,
            expect_clean=False,
        ),
        _s(
            "read_after_write_no_reorder",
            "read_after_write with torch._inductor.config.reorder_for_locality=False: re-inplaced, no clone",
            read_after_write=True,
            inductor_config=_NO_REORDER,
        ),
        _s("bf16", "split layout, bfloat16 pools and weights", dtype=torch.bfloat16),
        _s("fp16", "split layout, float16 pools and weights", dtype=torch.float16),
        _s(
            "dynamic",
            "split layout compiled with dynamic=True (symbolic sizes); one denoising step per chunk, so the one "
            "graph compiled is the commit graph (a non-commit step's graph writes no pool: symbolic tracing of it "
            "doubled the case's cost and gave the verdict nothing)",
            dynamic=True,
            denoise_steps=1,
        ),
        _s(
            "many_layers_per_region",
            "NEGATIVE CONTROL: 4 layers in one compiled region, commit last: every layer but the last keeps "
            "a clone of its K and V (reorder_for_locality again moves a commit above reads of that pool)",
            num_layers=4,
            layers_per_region=4,
            expect_clean=False,
        ),
        _s(
            "many_layers_no_reorder",
            "4 layers in one region with reorder_for_locality=False: re-inplaced, no clone",
            num_layers=4,
            layers_per_region=4,
            inductor_config=_NO_REORDER,
        ),
        _s("batch2", "two sequences, each its own vLLM request and block table", batch=2),
        _s(
            "attn_op_commit_after",
            "NEGATIVE CONTROL: attention as a custom op returning one tensor, commit right after it, one "
            "layer per region: reorder_for_locality sinks the window gathers below the commit, K and V of "
            "every layer are cloned",
            attention="custom_op",
            commit_order="after_attention",
            expect_clean=False,
        ),
        _s(
            "attn_op_commit_last",
            "attention as a custom op, commit as the region's last op (after the MLP): re-inplaced",
            attention="custom_op",
        ),
        _s(
            "commit_before",
            "RECOMMENDED: write the chunk's K/V first, then gather the window including it (vLLM / "
            "Self-Forcing order); the whole 4-layer model is one region: re-inplaced, no clone",
            commit_order="before_attention",
            num_layers=4,
            layers_per_region=4,
        ),
        _s(
            "commit_before_per_layer",
            "RECOMMENDED: commit before attention, one layer per region: re-inplaced, no clone",
            commit_order="before_attention",
        ),
        _s(
            "commit_before_attn_op",
            "commit before an attention custom op, whole 4-layer model one region: re-inplaced, no clone",
            commit_order="before_attention",
            attention="custom_op",
            num_layers=4,
            layers_per_region=4,
        ),
        _s(
            "index_put_commit",
            "NEGATIVE CONTROL: commit written with plain ATen k[slots] = new_k; v[slots] = new_v right "
            "after attention: index_put stays functional, a whole-pool copy of K and V per layer",
            commit_op="index_put",
            commit_order="after_attention",
            expect_clean=False,
        ),
        _s(
            "index_put_commit_last",
            "plain ATen k[slots] = new_k; v[slots] = new_v as the region's last op: re-inplaced (index_put_)",
            commit_op="index_put",
        ),
        _s(
            "evict_gather_commit",
            "the AR loop in one region: evict (k[evicted] = 0, re-inplaced), gather the window, attend, "
            "commit last: re-inplaced, no clone",
            evict_in_region=True,
        ),
        _s(
            "evict_gather_commit_after",
            "NEGATIVE CONTROL: evict, gather, commit right after a custom-op attention in one region: the "
            "window gathers are sunk below the commit, K and V are cloned around it (the copy is taken of "
            "the eviction's in-place result)",
            evict_in_region=True,
            attention="custom_op",
            commit_order="after_attention",
            expect_clean=False,
        ),
        _s(
            "cross_layer",
            "NEGATIVE CONTROL: vLLM's cross-layer KV layout, one (L, 2, N, H, D) allocation, big[l, 0] / "
            "big[l, 1] passed in; one compiled region reused for every layer: each call clones its own "
            "layer's K and V storage",
            layout="cross_layer",
            expect_clean=False,
        ),
        _s(
            "cross_layer_kv",
            "cross-layer KV layout, big[l] (2, N, H, D) passed whole and sliced inside the region (one graph "
            "input), one region reused for every layer: re-inplaced under auto_functionalized_v2",
            layout="cross_layer_kv",
            functionalization="v2",
        ),
    )
}

# Clean: the engine shapes that must stay clean in each layout / dtype / shape mode, and the
# recommended commit-before shape. Negative controls: each bug the check exists to catch must
# still be caught (a control that comes back clean fails the gate: the check went blind).
DEFAULT_GATE_CLEAN: tuple[str, ...] = (
    "split",
    "list",
    "module_attr",
    "bf16",
    "dynamic",
    "commit_before",
    "commit_before_per_layer",
    "evict_gather_commit",
    "cross_layer_kv",
)
DEFAULT_GATE_NEGATIVE: tuple[str, ...] = (
    "fused",
    "fused_kv_v1",
    "attn_op_commit_after",
    "index_put_commit",
    "evict_gather_commit_after",
    "cross_layer",
)
DEFAULT_GATE: tuple[str, ...] = DEFAULT_GATE_CLEAN + DEFAULT_GATE_NEGATIVE

# compiled fully (C++ codegen, one small graph: see compile_checks.scenarios.declared) and checked
# == eager by the gate; the rest is analysis-only. The negative control, so the full compile also shows
# the clone it keeps.
FULL_COMPILE_SMOKE: tuple[str, ...] = ("fused",)


class ModuleCaseSpec(NamedTuple):
    """One ``@support_torch_compile`` layer case (:mod:`compile_checks.scenarios.vllm_module`) of the default
    gate under a vLLM pipeline: named and expected here, so the gate plans it without building it."""

    name: str
    fused: bool  # K, V = kv[0], kv[1] of one allocation (the negative control) or two allocations
    description: str

    @property
    def expect_clean(self) -> bool:
        return not self.fused


VLLM_MODULE_CASES: tuple[ModuleCaseSpec, ...] = (
    ModuleCaseSpec(
        "vllm_module_split",
        False,
        "@support_torch_compile layer through vLLM's wrapper, K and V pools separate: re-inplaced",
    ),
    ModuleCaseSpec(
        "vllm_module_fused",
        True,
        "NEGATIVE CONTROL: @support_torch_compile layer, K/V = kv[0], kv[1] of one allocation: clone kept",
    ),
)


def scenario(name: str) -> Scenario:
    """Registry lookup with a message that lists the valid names."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; valid: {', '.join(SCENARIOS)}") from None


__all__ = [
    "DEFAULT_GATE",
    "DEFAULT_GATE_CLEAN",
    "DEFAULT_GATE_NEGATIVE",
    "FULL_COMPILE_SMOKE",
    "SCENARIOS",
    "VLLM_MODULE_CASES",
    "ModuleCaseSpec",
    "scenario",
]
