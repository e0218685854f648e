"""vLLM 0.33's own side-effect KV write, on CPU: ``torch.ops.vllm.unified_kv_cache_update`` and
``torch.ops.vllm.unified_attention_with_output`` (vLLM's real ops, registered by vLLM) over vLLM's real
forward context (``set_forward_context`` with a ``VllmConfig`` and a per-layer ``slot_mapping``).

The attention layer in the forward context is a stand-in: vLLM's CPU backend needs its ISA-specific
``_C`` kernels, so ``impl.do_kv_cache_update`` is an ``index_copy_`` into the layer's fused
``(2, slots, H, D)`` cache (what the CUDA backends' ``reshape_and_cache`` does per slot) and
``impl.forward`` writes ``query + sum(K cache)`` into ``output`` (it reads the cache, so a lost
write shows in the output too).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

LAYER = "model.layers.0.self_attn.attn"


class _Impl:
    def do_kv_cache_update(
        self, layer: Any, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        kv_cache[0].index_copy_(0, slot_mapping, key)
        kv_cache[1].index_copy_(0, slot_mapping, value)

    def forward(
        self,
        layer: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: Any,
        output: torch.Tensor,
        **_: Any,
    ) -> torch.Tensor:
        if layer.update_in_forward:  # a backend with forward_includes_kv_cache_update
            from vllm.forward_context import get_forward_context

            self.do_kv_cache_update(layer, key, value, kv_cache, get_forward_context().slot_mapping[LAYER])
        output.copy_(query + kv_cache[0].sum())
        return output


class StandInAttention(torch.nn.Module):
    """What vLLM's forward context holds per layer: ``kv_cache`` and ``impl``."""

    def __init__(self, slots: int, heads: int, dim: int) -> None:
        super().__init__()
        self.kv_cache = torch.zeros(2, slots, heads, dim)
        self.impl = _Impl()
        self.update_in_forward = False


def _import_vllm_attention() -> None:
    """Import vLLM's attention module (it registers ``torch.ops.vllm.unified_*``).

    vLLM's attention package imports ``einops`` at module level for its ViT wrappers only; where einops
    is not installed (this venv), an empty placeholder module stands in for that import alone.
    """
    import importlib.machinery
    import importlib.util
    import sys
    import types

    from compile_checks.pipelines.vllm import vllm_module

    if "einops" not in sys.modules and importlib.util.find_spec("einops") is None:
        placeholder = types.ModuleType("einops")
        placeholder.__spec__ = importlib.machinery.ModuleSpec("einops", None)
        sys.modules["einops"] = placeholder
    vllm_module("vllm.model_executor.layers.attention.attention")


@contextlib.contextmanager
def vllm_forward(slots: int = 16, heads: int = 2, dim: int = 4) -> Iterator[tuple[Any, StandInAttention]]:
    """A CPU ``VllmConfig`` with one attention layer in its static forward context; vLLM's ops registered."""
    from compile_checks.pipelines.vllm import make_vllm_config
    from compile_checks.pipelines.vllm_env import vllm_env

    with vllm_env():
        _import_vllm_attention()
        config = make_vllm_config(backend=None)
        layer = StandInAttention(slots, heads, dim)
        config.compilation_config.static_forward_context[LAYER] = layer
        yield config, layer


def driver_for(config: Any, slots: torch.Tensor, *args: torch.Tensor) -> Callable[[Callable[..., Any]], Any]:
    """The engine's host loop for one step: vLLM's forward context set around the call, as the runner does."""
    from vllm.forward_context import set_forward_context

    def driver(step: Callable[..., Any]) -> Any:
        with set_forward_context(None, config, slot_mapping={LAYER: slots}):
            return step(*args)

    return driver


def vllm_pattern(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """vLLM's ``Attention.forward`` (``use_direct_call=False``): the dummy feeds attention as ``kv_cache_dummy_dep``."""
    output = torch.empty_like(q)
    dummy = torch.ops.vllm.unified_kv_cache_update(k, v, LAYER)
    torch.ops.vllm.unified_attention_with_output(q, k, v, output, LAYER, kv_cache_dummy_dep=dummy)
    return output


def dummy_dropped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """NEGATIVE CONTROL: the dummy dependency forgotten; AOT autograd drops the KV update."""
    output = torch.empty_like(q)
    torch.ops.vllm.unified_kv_cache_update(k, v, LAYER)
    torch.ops.vllm.unified_attention_with_output(q, k, v, output, LAYER)
    return output


def dummy_into_sum(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """NEGATIVE CONTROL: the dummy only feeds a size-0 reduction; kept in post-grad, dropped by codegen."""
    output = torch.empty_like(q)
    dummy = torch.ops.vllm.unified_kv_cache_update(k, v, LAYER)
    torch.ops.vllm.unified_attention_with_output(q, k, v, output, LAYER)
    return output + dummy.sum()


def update_in_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """vLLM's ``Attention.forward`` for a backend whose forward includes the KV update: no separate update op."""
    output = torch.empty_like(q)
    torch.ops.vllm.unified_attention_with_output(q, k, v, output, LAYER)
    return output
