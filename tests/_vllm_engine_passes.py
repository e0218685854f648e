"""Planted post-grad passes for vllm.LLM's gate (negative controls), given to vLLM the documented way:
``compilation_config={"inductor_compile_config": {"post_grad_custom_post_pass": [...]}}``, each a vLLM
``InductorPass`` acting on one layer (``layer``: its index in the layer's name).

* :class:`DropCacheUpdate`: deletes the layer's ``vllm::unified_kv_cache_update`` (a lost write);
* :class:`CopyKHalfToReader`: feeds an opaque reader a copy of the layer's K half (a pool-filled buffer);
* :class:`RedirectWriteThroughClone`: the cache write goes to a clone of the cache (a whole-cache copy);
* :class:`ReadOldCacheAfterWrite`: an opaque reader of the cache's old value after its write (Inductor
  must keep a copy: a read-after-write refusal).

The last three need the cache in the graph: :func:`cache_whole_in_graph` has vLLM's attention hand
``self.kv_cache`` whole to one opaque write (``cc_engine_test::write_cache``): clean without a pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch
import torch.fx
from _vllm_engine_models import forward_writing
from torch.fx.node import has_side_effect
from vllm.compilation.passes.inductor_pass import InductorPass

_AF = (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2)


@torch.library.custom_op("cc_engine_test::write_cache", mutates_args=("kv_cache",))
def write_cache(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, layer_name: str) -> None:
    """vLLM's CPU cache write (``cpu_attn_reshape_and_cache``) into the layer's whole cache, split inside."""
    from vllm import _custom_ops as ops
    from vllm.forward_context import get_forward_context

    context = get_forward_context()
    slots = context.slot_mapping.get(layer_name) if isinstance(context.slot_mapping, dict) else None
    if slots is None:  # a dummy run without attention metadata writes nothing (as vLLM's own op)
        return
    layer = context.no_compile_layers[layer_name]
    blocks, heads, block, _ = kv_cache.shape
    key_cache, value_cache = kv_cache.view(blocks, heads, block * 2, -1).chunk(2, dim=2)
    ops.cpu_attn_reshape_and_cache(
        key, value, key_cache, value_cache, slots, layer.isa,
        k_scale=layer._k_scale_float, v_scale=layer._v_scale_float, kv_cache_dtype=layer.impl.kv_cache_dtype,
    )  # fmt: skip


@write_cache.register_fake
def _(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, layer_name: str) -> None:
    return None


@torch.library.custom_op("cc_engine_test::read_cache", mutates_args=())
def read_cache(x: torch.Tensor) -> None:
    """An opaque reader (a logger, a debug hook): reads ``x``, changes nothing."""
    float(x.sum())


@read_cache.register_fake
def _(x: torch.Tensor) -> None:
    return None


has_side_effect(torch.ops.cc_engine_test.read_cache.default)  # kept by DCE and by Inductor's scheduler


def _write_whole_cache(self: Any, key: torch.Tensor, value: torch.Tensor) -> None:
    torch.ops.cc_engine_test.write_cache(key, value, self.kv_cache, self.layer_name)


_forward_whole_cache_in_graph = forward_writing(_write_whole_cache)


@contextlib.contextmanager
def cache_whole_in_graph(layers: tuple[int, ...]) -> Iterator[None]:
    """vLLM's ``Attention.forward`` of ``layers`` (indices) takes the layer's cache into the graph, written by one
    opaque op (clean); the other layers keep vLLM's own attention."""
    from vllm.model_executor.layers.attention.attention import Attention

    original = Attention.forward

    def forward(self: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        mine = any(f".layers.{i}." in self.layer_name for i in layers)
        return (_forward_whole_cache_in_graph if mine else original)(self, *args, **kwargs)

    with mock.patch.object(Attention, "forward", forward):
        yield


def _layer_of(node: torch.fx.Node) -> str | None:
    for a in [*node.args, *node.kwargs.values()]:
        if isinstance(a, torch.fx.Node):  # vLLM's LayerName: an opaque value hoisted to a graph input
            a = a.meta.get("val") if a.op == "placeholder" else None
            a = object.__getattribute__(a, "real_obj") if type(a).__name__ == "FakeScriptObject" else a
        a = getattr(a, "value", a)  # vLLM's LayerName
        if isinstance(a, str) and ".layers." in a:
            return a
    return None


def _fake(node: torch.fx.Node, value: Any) -> torch.fx.Node:
    node.meta["val"] = value
    return node


class _LayerPass(InductorPass):
    def __init__(self, layer: int) -> None:
        self.layer = layer

    def _mine(self, node: torch.fx.Node) -> bool:
        name = _layer_of(node)
        return name is not None and f".layers.{self.layer}." in name

    def _cache_writes(self, graph: torch.fx.Graph) -> list[torch.fx.Node]:
        return [
            n
            for n in graph.nodes
            if n.op == "call_function"
            and n.target in _AF
            and n.args[0] is torch.ops.cc_engine_test.write_cache.default
            and self._mine(n)
        ]

    @staticmethod
    def _cache_of(write: torch.fx.Node) -> torch.fx.Node:
        bases = write.kwargs.get("_all_bases")
        return bases[0] if bases else write.kwargs["kv_cache"]


class DropCacheUpdate(_LayerPass):
    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.target is torch.ops.vllm.unified_kv_cache_update.default and self._mine(node):
                old = node.meta["val"]
                with graph.inserting_before(node):
                    empty = graph.call_function(
                        torch.ops.aten.empty.memory_format, ([0],), {"dtype": old.dtype, "device": old.device}
                    )
                _fake(empty, old)
                node.replace_all_uses_with(empty)
                graph.erase_node(node)


class CopyKHalfToReader(_LayerPass):
    def __call__(self, graph: torch.fx.Graph) -> None:
        for write in self._cache_writes(graph):
            cache = self._cache_of(write)
            val = cache.meta["val"]
            blocks, heads, block, _ = val.shape
            shape = [blocks, heads, 2 * block, -1]
            with graph.inserting_before(write):
                view = _fake(graph.call_function(torch.ops.aten.view.default, (cache, shape)), val.view(shape))
                k = _fake(
                    graph.call_function(torch.ops.aten.slice.Tensor, (view, 2, 0, block)),
                    view.meta["val"][:, :, :block],
                )
                copy = _fake(graph.call_function(torch.ops.aten.clone.default, (k,)), k.meta["val"].clone())
                _fake(graph.call_function(torch.ops.cc_engine_test.read_cache.default, (copy,)), None)


class RedirectWriteThroughClone(_LayerPass):
    def __call__(self, graph: torch.fx.Graph) -> None:
        for write in self._cache_writes(graph):
            cache = self._cache_of(write)
            with graph.inserting_before(write):
                copy = _fake(graph.call_function(torch.ops.aten.clone.default, (cache,)), cache.meta["val"].clone())
            if "_all_bases" in write.kwargs:
                write.update_kwarg("_all_bases", [copy])
            else:
                write.update_kwarg("kv_cache", copy)


class ReadOldCacheAfterWrite(_LayerPass):
    def __call__(self, graph: torch.fx.Graph) -> None:
        for write in self._cache_writes(graph):
            with graph.inserting_after(write):
                _fake(graph.call_function(torch.ops.cc_engine_test.read_cache.default, (self._cache_of(write),)), None)


def with_passes(*passes: InductorPass) -> dict[str, Any]:
    """``vllm.LLM`` options that install ``passes`` as Inductor's post-grad custom post pass."""
    return {"compilation_config": {"inductor_compile_config": {"post_grad_custom_post_pass": list(passes)}}}
