"""Tiny random-weight models for vllm.LLM (written with save_pretrained: nothing fetched), and the
negative control: vLLM's attention patched to write the KV cache inside the compiled graph, taking
K and V as two views of one allocation (the layer's cache) and handing them to an opaque op.

vLLM's own attention writes the cache inside its opaque op ``unified_kv_cache_update``, looking the
cache up by layer name: the compiled graph never holds it. The patched forward reads
``self.kv_cache`` in the graph instead and splits it the way vLLM's CPU backend does
(``view(blocks, heads, 2 * block, -1).chunk(2, dim=2)``); the op writes through those two views with
vLLM's own kernel. Functionalization must clone the cache for the two aliasing mutated arguments:
a whole-layer copy on every call, which the gate must fail.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch

# vLLM's CPU attention refuses head_dim 16; 64 is the smallest size these models use
HEAD_DIM = 64


def write_model(folder: Path, arch: str, layers: int = 2) -> Path:
    """A random-weight model (hidden 256, head_dim 64, GQA; ``layers`` layers) of ``arch`` in ``folder``:
    'llama', 'qwen2', 'phi3' (fused QKV and gate-up projections) or 'gemma2' (a sliding-window layer and a
    full-attention layer: vLLM's hybrid KV cache manager gives both one allocation)."""
    import transformers

    common: dict[str, Any] = {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "head_dim": HEAD_DIM,
        "vocab_size": 512,
        "max_position_embeddings": 256,
    }
    if arch == "llama":
        config: Any = transformers.LlamaConfig(num_key_value_heads=2, **common)
        model: Any = transformers.LlamaForCausalLM(config)
    elif arch == "qwen2":  # qkv bias, one KV head for four query heads, tied embeddings
        config = transformers.Qwen2Config(num_key_value_heads=1, tie_word_embeddings=True, **common)
        model = transformers.Qwen2ForCausalLM(config)
    elif arch == "phi3":
        config = transformers.Phi3Config(num_key_value_heads=2, pad_token_id=0, **common)
        model = transformers.Phi3ForCausalLM(config)
    elif arch == "gemma2":  # layer types alternate sliding / full; logit soft-capping
        config = transformers.Gemma2Config(num_key_value_heads=2, sliding_window=16, **common)
        model = transformers.Gemma2ForCausalLM(config)
    else:
        raise ValueError(f"arch must be 'llama', 'qwen2', 'phi3' or 'gemma2', got {arch!r}")
    torch.manual_seed(0)
    model.save_pretrained(folder)
    return folder


@torch.library.custom_op("cc_engine_test::reshape_and_cache", mutates_args=("key_cache", "value_cache"))
def reshape_and_cache(
    key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, layer_name: str
) -> None:
    """vLLM's CPU cache write (``cpu_attn_reshape_and_cache``) into the two views it is handed."""
    from vllm import _custom_ops as ops
    from vllm.forward_context import get_forward_context

    context = get_forward_context()
    slots = context.slot_mapping.get(layer_name) if isinstance(context.slot_mapping, dict) else None
    if slots is None:  # a dummy run without attention metadata writes nothing (as vLLM's own op)
        return
    layer = context.no_compile_layers[layer_name]
    ops.cpu_attn_reshape_and_cache(
        key,
        value,
        key_cache,
        value_cache,
        slots,
        layer.isa,
        k_scale=layer._k_scale_float,
        v_scale=layer._v_scale_float,
        kv_cache_dtype=layer.impl.kv_cache_dtype,
    )


@reshape_and_cache.register_fake
def _(
    key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, layer_name: str
) -> None:
    return None


def forward_writing(write: Callable[[Any, torch.Tensor, torch.Tensor], None]) -> Callable[..., torch.Tensor]:
    """vLLM's ``Attention.forward`` with its cache write replaced by ``write(layer, key, value)`` (in the graph),
    then vLLM's own attention op."""

    def forward(
        self: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        output_shape: torch.Size | None = None,
        output_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        from vllm.utils.torch_utils import _encode_layer_name

        num_tokens = query.shape[0]
        output = torch.empty((num_tokens, self.num_heads * self.head_size_v), dtype=query.dtype, device=query.device)
        hidden = output.shape[-1]
        query = query.view(-1, self.num_heads, self.head_size)
        output = output.view(-1, self.num_heads, self.head_size_v)
        key = key.view(-1, self.num_kv_heads, self.head_size)
        value = value.view(-1, self.num_kv_heads, self.head_size_v)
        write(self, key, value)
        torch.ops.vllm.unified_attention_with_output(query, key, value, output, _encode_layer_name(self.layer_name))
        return output.view(-1, hidden)

    return forward


def _write_through_two_views(self: Any, key: torch.Tensor, value: torch.Tensor) -> None:
    cache = self.kv_cache  # the layer's cache, a graph input
    blocks, heads, block, _ = cache.shape
    key_cache, value_cache = cache.view(blocks, heads, block * 2, -1).chunk(2, dim=2)
    torch.ops.cc_engine_test.reshape_and_cache(key, value, key_cache, value_cache, self.layer_name)


_forward_with_cache_in_graph = forward_writing(_write_through_two_views)


@contextlib.contextmanager
def cache_written_in_graph() -> Iterator[None]:
    """vLLM's ``Attention.forward`` replaced by :func:`_forward_with_cache_in_graph` for the duration."""
    from vllm.model_executor.layers.attention.attention import Attention

    with mock.patch.object(Attention, "forward", _forward_with_cache_in_graph):
        yield


@contextlib.contextmanager
def compiled_calls_drop_cache_writes() -> Iterator[None]:
    """A planted lost write: every second write of each layer's cache by vLLM's CPU cache op does nothing.

    Under the write check each compiled call runs its captured graph eagerly first and the compiled code
    second, each writing the layer's cache once: the compiled code's write is the one dropped, as a
    miscompile that loses the cache update would.
    """
    from vllm import _custom_ops as ops

    real = ops.cpu_attn_reshape_and_cache
    seen: dict[int, int] = {}

    def every_second_write_dropped(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, *args, **kwargs):  # type: ignore[no-untyped-def]
        n = seen[key_cache.data_ptr()] = seen.get(key_cache.data_ptr(), 0) + 1
        if n % 2 == 0:
            return None
        return real(key, value, key_cache, *args, **kwargs)

    with mock.patch.object(ops, "cpu_attn_reshape_and_cache", every_second_write_dropped):
        yield
