"""A small ``@support_torch_compile`` module, so the gate exercises vLLM's own compile wrapper.

``PagedCommitLayer`` is one attention layer the way a vLLM model holds it: weights as
parameters, the K/V pools as module buffers, the commit through ar_paging's ``paged_write``
custom op, and attention as an opaque custom op (``compile_checks_vllm_model::attention``,
a stand-in for ``vllm::unified_attention``) that the "vllm-piecewise" simulation splits at.

:func:`vllm_module_cases` gives two cases, both ``pipeline="vllm"``:

* ``vllm_module_split``: K and V pools are two allocations: re-inplaced, clean;
* ``vllm_module_fused`` (NEGATIVE CONTROL): K, V = kv[0], kv[1] of one ``(2, N, H, D)``
  allocation: two graph inputs sharing a storage, so reinplace keeps a clone of it.

Building the module imports vLLM (its config decides the backend at construction).
"""

from __future__ import annotations

import math
from typing import Any

import torch

import ar_paging  # noqa: F401 - registers torch.ops.ar_paging.paged_write
from compile_checks.case import Case, pipeline_label
from compile_checks.scenarios.registry import VLLM_MODULE_CASES
from compile_checks.vocab import Pipeline

ATTENTION_OP = "compile_checks_vllm_model::attention"


@torch.library.custom_op(ATTENTION_OP, mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention of ``(T, H, D)`` queries over the chunk's own ``(T, H, D)`` K/V."""
    scores = torch.einsum("thd,shd->hts", q.float(), k.float()) / math.sqrt(q.shape[-1])
    out = torch.einsum("hts,shd->thd", scores.softmax(dim=-1), v.float())
    return out.to(q.dtype).contiguous()  # the strides the fake (empty_like(q)) promises Inductor


@attention.register_fake
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q)


def _support_torch_compile(cls: type) -> type:
    from compile_checks.pipelines.vllm_env import vllm_module

    support_torch_compile = vllm_module("vllm.compilation.decorators").support_torch_compile
    return support_torch_compile(dynamic_arg_dims={"x": 0, "slot_mapping": 0})(cls)


class _PagedCommitLayer(torch.nn.Module):
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor

    """Project a chunk to Q/K/V, commit K/V into the paged pools, attend, project out."""

    def __init__(self, *, k_cache: torch.Tensor, v_cache: torch.Tensor, seed: int = 0, **_: Any) -> None:
        super().__init__()
        heads, dim = k_cache.shape[1], k_cache.shape[2]
        hidden = heads * dim
        g = torch.Generator().manual_seed(seed)
        for name in ("wq", "wk", "wv", "wo"):
            w = torch.randn(hidden, hidden, generator=g, dtype=k_cache.dtype) / math.sqrt(hidden)
            self.register_parameter(name, torch.nn.Parameter(w, requires_grad=False))
        self.register_buffer("k_cache", k_cache, persistent=False)
        self.register_buffer("v_cache", v_cache, persistent=False)

    def forward(self, x: torch.Tensor, slot_mapping: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        heads, dim = self.k_cache.shape[1], self.k_cache.shape[2]
        q = (x @ self.wq).view(n, heads, dim)
        k = (x @ self.wk).view(n, heads, dim)
        v = (x @ self.wv).view(n, heads, dim)
        torch.ops.ar_paging.paged_write(self.k_cache, self.v_cache, k, v, slot_mapping)
        attn = torch.ops.compile_checks_vllm_model.attention(q, k, v)
        return x + attn.reshape(n, heads * dim) @ self.wo


_DECORATED: list[type[_PagedCommitLayer]] = []


def paged_commit_layer_cls() -> type[_PagedCommitLayer]:
    """``_PagedCommitLayer`` decorated with vLLM's ``@support_torch_compile`` (built once)."""
    if not _DECORATED:
        _DECORATED.append(_support_torch_compile(type("PagedCommitLayer", (_PagedCommitLayer,), {})))
    return _DECORATED[0]


def build_layer(k_cache: torch.Tensor, v_cache: torch.Tensor, *, seed: int = 0) -> _PagedCommitLayer:
    """A ``PagedCommitLayer`` built under vLLM's CPU config (backend: the check's resolver)."""
    from compile_checks.pipelines.vllm import make_vllm_config, vllm_compile_context

    config = make_vllm_config(splitting_ops=[ATTENTION_OP])
    with vllm_compile_context(vllm_config=config):
        return paged_commit_layer_cls()(k_cache=k_cache, v_cache=v_cache, seed=seed)


def _reference(layer: _PagedCommitLayer, x: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Eager forward on copies of the pools: (output, k_pool, v_pool) the compiled run must match."""
    k, v = layer.k_cache.clone(), layer.v_cache.clone()
    heads, dim = k.shape[1], k.shape[2]
    n = x.shape[0]
    q, kn, vn = ((x @ w).view(n, heads, dim) for w in (layer.wq, layer.wk, layer.wv))
    torch.ops.ar_paging.paged_write(k, v, kn, vn, slots)
    out = x + attention(q, kn, vn).reshape(n, heads * dim) @ layer.wo
    return out, k, v


def vllm_module_case(
    fused: bool,
    *,
    pipeline: Pipeline = Pipeline.VLLM,
    num_slots: int = 256,
    heads: int = 2,
    dim: int = 16,
    tokens: int = 16,
) -> Case:
    """The split (clean) or fused (negative control) ``PagedCommitLayer`` case."""
    shape = (num_slots, heads, dim)
    if fused:
        kv = torch.zeros((2, *shape))
        k_cache, v_cache = kv[0], kv[1]
    else:
        k_cache, v_cache = torch.zeros(shape), torch.zeros(shape)
    layer = build_layer(k_cache, v_cache)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, heads * dim, generator=g)
    slots = torch.randperm(num_slots, generator=g)[:tokens]
    want = _reference(layer, x, slots)

    def verify(output: torch.Tensor) -> tuple[bool, float]:
        got = (output, k_cache, v_cache)
        diff = max(float((a - b).abs().max()) for a, b in zip(got, want))
        return diff <= 1e-4, diff

    spec = next(c for c in VLLM_MODULE_CASES if c.fused == fused)
    return Case(
        name=pipeline_label(spec.name, pipeline),
        fn=layer,
        args=(x, slots),
        pools={"k": k_cache, "v": v_cache},
        expect_clean=spec.expect_clean,
        pipeline=pipeline,
        verify=verify,
        description=spec.description,
    )


def vllm_module_cases(pipeline: Pipeline = Pipeline.VLLM) -> list[Case]:
    """The split layer (clean) and its fused negative twin, compiled through vLLM's wrapper."""
    return [vllm_module_case(False, pipeline=pipeline), vllm_module_case(True, pipeline=pipeline)]


__all__ = ["ATTENTION_OP", "build_layer", "paged_commit_layer_cls", "vllm_module_case", "vllm_module_cases"]
