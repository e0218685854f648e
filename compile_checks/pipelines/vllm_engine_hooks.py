"""Where the gate joins vLLM's own engine (``vllm.LLM`` with vLLM's CPU build): three hooks, each undone on exit.

* **Inductor through the check.** vLLM's CPU platform compiles the model runner's forward with
  ``torch.compile(forward, backend="inductor", options=<vLLM's inductor_compile_config>)``
  (``CompilationMode.DYNAMO_TRACE_ONCE``; ``TorchCompileWithNoGuardsWrapper``). The ``inductor``
  backend is ``torch._TorchCompileInductorWrapper``; while :func:`inductor_through` is active its
  call hands each dynamo graph to the check's backend with the options vLLM gave it, so the regions
  are vLLM's and so is the config.
* **The KV cache, per allocation, from the engine.** :class:`EngineCaches` reads each attention layer's
  ``kv_cache`` from vLLM's forward context (``no_compile_layers``: the model's
  ``static_forward_context``) before every region call, layers sharing one allocation (vLLM's hybrid
  KV cache manager) as one pool (:func:`shared_pools`); and records, per layer, each time vLLM's
  cache ops (``unified_kv_cache_update`` / ``unified_attention_with_output``, through
  ``get_attention_context``) reach that layer's cache by its name while the engine runs.
* **The warm-up after the cache exists.** vLLM's CPU worker compiles in its warm-up, *before* the KV
  cache is allocated (each layer's ``kv_cache`` is then an empty placeholder). A model that takes the
  cache into its compiled graph would be traced against that placeholder; :func:`warm_up_after_cache`
  runs the same warm-up (``CPUModelRunner.warming_up_model``: the dummy run of the generic shape)
  right after ``initialize_kv_cache`` instead. vLLM's own attention reaches the cache only inside
  opaque ops, so for it the compiled region is the same either way. It needs an explicit cache size
  (vLLM sizes the cache from the warm-up's memory otherwise): :mod:`compile_checks.pipelines.vllm_engine`
  always passes ``kv_cache_memory_bytes``.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any
from unittest import mock

import torch

from compile_checks.check.graph.geometry import StorageRef
from compile_checks.check.graph.overlap import views_overlap
from compile_checks.check.storage_identity import storage_key
from compile_checks.pipelines.vllm_env import vllm_module

# vLLM's module whose cache ops look the layer (and its kv_cache) up by name
ATTENTION_MODULE = "vllm.model_executor.layers.attention.attention"


@contextlib.contextmanager
def inductor_through(
    backend: Callable[..., Any], options_hook: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> Iterator[None]:
    """Every ``torch.compile(..., backend="inductor", options=...)`` graph compiles through ``backend``
    (called ``backend(gm, example_inputs, options=<the options torch.compile was given>)``, passed through
    ``options_hook`` when given: the engine gate watches vLLM's custom passes there)."""
    wrapper_cls = torch._TorchCompileInductorWrapper

    def call(self: Any, model_: torch.fx.GraphModule, inputs_: Sequence[Any]) -> Any:
        options = dict(self.config)
        return backend(model_, inputs_, options=options_hook(options) if options_hook else options)

    with mock.patch.object(wrapper_cls, "__call__", call):
        yield


class EngineCaches:
    """The engine's KV cache tensors, one pool per allocation, as vLLM's forward context holds them.

    A zero-argument callable (``CloneCheck(pools=...)`` re-reads it before every region call): the
    non-empty ``kv_cache`` of each attention layer of the running forward; outside a forward (the
    check reads it once more on exit), the last ones read. Layers whose caches share memory (vLLM's
    hybrid KV cache manager points a sliding-window layer and a full-attention layer at one tensor)
    are one pool, named by its layers joined with ``+`` (:func:`shared_pools`); ``layers_of`` says
    which layers each pool holds.
    """

    def __init__(self) -> None:
        self._forward_context = vllm_module("vllm.forward_context")
        self.last: dict[str, torch.Tensor] = {}
        # pool name -> the layers whose kv_cache it is (one, or several sharing one allocation)
        self.layers_of: dict[str, tuple[str, ...]] = {}
        # layer name -> its own kv_cache tensor (a view of its pool)
        self.layer_tensors: dict[str, torch.Tensor] = {}
        # layer name -> how many times vLLM's cache ops reached that layer's cache by name
        self.reached: Counter[str] = Counter()
        # pool name -> reaches of any of its layers' caches (what the check's attribution reads)
        self.reached_pools: Counter[str] = Counter()
        # layer names whose cache a cache op reached while it was not the tensor the check names
        self.stale: set[str] = set()
        # true while a reach is not the engine's own (the write check's eager run of a compiled call's graph)
        self.not_counted: Callable[[], bool] = lambda: False

    def __call__(self) -> dict[str, torch.Tensor]:
        if not self._forward_context.is_forward_context_available():
            return dict(self.last)
        layers = self._forward_context.get_forward_context().no_compile_layers
        self.read(layers)
        return dict(self.last)

    def read(self, forward_context: Mapping[str, Any]) -> None:
        """The caches from a model's forward context (vLLM's ``static_forward_context``), outside a forward."""
        caches = {name: cache for name, cache in _layer_caches(forward_context).items() if cache.numel() > 0}
        if caches:
            self.last, self.layers_of = shared_pools(caches)
            self.layer_tensors = caches

    @contextlib.contextmanager
    def recording_reaches(self) -> Iterator[None]:
        """Count, per layer, vLLM's cache ops reaching that layer's cache (``get_attention_context``)."""
        attention = vllm_module(ATTENTION_MODULE)
        original = attention.get_attention_context

        def get_attention_context(layer_name: Any) -> Any:
            out = original(layer_name)
            name = attention._resolve_layer_name(layer_name)
            cache = out[2]
            if isinstance(cache, torch.Tensor) and cache.numel() > 0 and not self.not_counted():
                self.reached[name] += 1
                self.reached_pools[next((p for p, ls in self.layers_of.items() if name in ls), name)] += 1
                if self.layer_tensors and self.layer_tensors.get(name) is not cache:
                    self.stale.add(name)
            return out

        with mock.patch.object(attention, "get_attention_context", get_attention_context):
            yield


def shared_pools(caches: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, tuple[str, ...]]]:
    """One pool per allocation: layers whose caches share an element of memory are one pool.

    Returns (pool name -> tensor, pool name -> its layers). A pool of one layer is named by it; of several,
    by their names joined with ``+``, its tensor the layer's cache that spans all of theirs (vLLM's hybrid
    manager: the same bytes viewed per layer), else a byte view of the storage over their union.
    Caches that only share a storage (vLLM allocates the layers' caches side by side) stay apart.
    """
    groups: list[list[str]] = []
    for name, t in caches.items():
        hits = [g for g in groups if any(_share_memory(t, caches[other]) for other in g)]
        merged = [n for g in hits for n in g] + [name]
        groups = [g for g in groups if all(g is not h for h in hits)] + [merged]
    order = list(caches)
    pools: dict[str, torch.Tensor] = {}
    layers_of: dict[str, tuple[str, ...]] = {}
    for group in sorted(groups, key=lambda g: min(order.index(n) for n in g)):
        names = tuple(sorted(group, key=order.index))
        pool = "+".join(names)
        pools[pool] = _spanning(caches[n] for n in names)
        layers_of[pool] = names
    return pools, layers_of


def _share_memory(t: torch.Tensor, u: torch.Tensor) -> bool:
    if t.device != u.device or storage_key(t) != storage_key(u):
        return False
    return views_overlap(StorageRef.of(t).geometry, StorageRef.of(u).geometry)


def _spanning(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """The tensor whose byte span covers all of ``tensors``', else a byte view of their union."""
    members = list(tensors)
    spans = [StorageRef.of(t).byte_span() for t in members]
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
    for t, span in zip(members, spans, strict=True):
        if span == (lo, hi):
            return t
    first = members[0]
    return first.new_empty(0, dtype=torch.uint8).set_(first.untyped_storage(), lo, (hi - lo,), (1,))


def _layer_caches(layers: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Each attention layer's ``kv_cache`` (a tensor; vLLM versions that kept one per virtual engine: the first)."""
    out: dict[str, torch.Tensor] = {}
    for name, layer in layers.items():
        cache = getattr(layer, "kv_cache", None)
        if isinstance(cache, (list, tuple)):
            cache = cache[0] if cache else None
        if isinstance(cache, torch.Tensor):
            out[name] = cache
    return out


@contextlib.contextmanager
def warm_up_after_cache() -> Iterator[list[str]]:
    """vLLM's CPU warm-up (the compile) runs after the KV cache is bound instead of before it.

    Yields a list the hooks append what they did to (for the report's notes).
    """
    runner_module = vllm_module("vllm.v1.worker.cpu_model_runner")
    worker_module = vllm_module("vllm.v1.worker.cpu_worker")
    runner_cls, worker_cls = runner_module.CPUModelRunner, worker_module.CPUWorker
    warm_up, compile_or_warm_up = runner_cls.warming_up_model, worker_cls.compile_or_warm_up_model
    notes: list[str] = []

    def warming_up_model(self: Any) -> None:
        if not self.kv_caches:  # the worker's memory probe, before the cache exists: deferred
            notes.append("vLLM's warm-up (the compile) ran after the KV cache was bound, not before")
            return
        warm_up(self)

    def compile_or_warm_up_model(self: Any) -> Any:
        out = compile_or_warm_up(self)
        if self.model_runner.kv_caches:
            warm_up(self.model_runner)
        return out

    with (
        mock.patch.object(runner_cls, "warming_up_model", warming_up_model),
        mock.patch.object(worker_cls, "compile_or_warm_up_model", compile_or_warm_up_model),
    ):
        yield notes


__all__ = ["ATTENTION_MODULE", "EngineCaches", "inductor_through", "shared_pools", "warm_up_after_cache"]
