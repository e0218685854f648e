"""vLLM's custom post-grad passes, watched: which pass added, removed or rewired which node, by layer.

vLLM hands Inductor its own and its users' graph passes through ``inductor_compile_config``
(``post_grad_custom_pre_pass`` / ``post_grad_custom_post_pass``: a vLLM ``InductorPass`` or a list of
them). :class:`PassWatch` wraps each one the check's backend is given (:meth:`PassWatch.wrap`) and records,
per compiled region, a :class:`PassEdit`: the nodes the pass removed, added and rewired (its inputs changed),
with their ops and the attention layer a node names (vLLM's cache ops take the layer's name).
:mod:`compile_checks.pipelines.vllm_engine_culprits` turns them into the culprit of each finding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass

# Inductor's options that hold post-grad graph passes (a pass, or a list of them)
PASS_SLOTS = ("post_grad_custom_pre_pass", "post_grad_custom_post_pass")


@dataclass(frozen=True)
class NodeInfo:
    """A node as a pass saw it: its op, its input nodes, the layer it names (a string argument), if any."""

    target: str
    inputs: tuple[str, ...]
    layer: str | None


@dataclass
class PassEdit:
    """What one run of one pass did to one graph of a compiled region."""

    region: int
    slot: str  # the Inductor option it came through
    pass_class: str
    removed: dict[str, NodeInfo] = field(default_factory=dict)
    added: dict[str, NodeInfo] = field(default_factory=dict)
    rewired: dict[str, NodeInfo] = field(default_factory=dict)  # kept nodes whose inputs it changed

    @property
    def touched(self) -> dict[str, NodeInfo]:
        return {**self.removed, **self.added, **self.rewired}

    def action(self, node: str) -> str:
        return "removed" if node in self.removed else "added" if node in self.added else "rewired"

    def names(self) -> str:
        return f"{self.pass_class} ({self.slot})"


def snapshot(graph: torch.fx.Graph) -> dict[str, NodeInfo]:
    """Every node's :class:`NodeInfo`. A node naming no layer takes its inputs' (a view or a clone of a layer's
    cache); a graph input takes the layer its users name (the layer's cache, handed to the layer's ops)."""
    layers: dict[torch.fx.Node, str | None] = {}
    for n in graph.nodes:
        own = _layer(n)
        if own is None and n.op == "placeholder":
            own = next((x for x in map(_layer, n.users) if x is not None), None)
        if own is None:
            own = next((layers[i] for i in n.all_input_nodes if layers.get(i) is not None), None)
        layers[n] = own
    return {n.name: _info(n, layers[n]) for n in graph.nodes}


def _info(node: torch.fx.Node, layer: str | None) -> NodeInfo:
    target = getattr(node.target, "__name__", None) or str(node.target)
    if node.op == "call_function" and node.args and isinstance(node.args[0], torch._ops.OpOverload):
        target = f"{target}({node.args[0]})"  # auto_functionalized(<the op>)
    elif isinstance(node.target, torch._ops.OpOverload):
        target = str(node.target)
    return NodeInfo(target, tuple(n.name for n in node.all_input_nodes), layer)


def _layer(node: torch.fx.Node) -> str | None:
    """The layer a node names: a string argument, or vLLM's ``LayerName`` (an opaque value, hoisted to a graph
    input whose value it is)."""
    for a in [*node.args, *node.kwargs.values()]:
        if isinstance(a, torch.fx.Node):
            a = a.meta.get("val") if a.op == "placeholder" else None
            a = object.__getattribute__(a, "real_obj") if type(a).__name__ == "FakeScriptObject" else a
        a = getattr(a, "value", a)
        if isinstance(a, str) and a:
            return a
    return None


def diff(before: Mapping[str, NodeInfo], after: Mapping[str, NodeInfo]) -> tuple[dict, dict, dict]:  # type: ignore[type-arg]
    removed = {k: v for k, v in before.items() if k not in after}
    added = {k: v for k, v in after.items() if k not in before}
    rewired = {k: v for k, v in after.items() if k in before and before[k].inputs != v.inputs}
    return removed, added, rewired


class _Watched(CustomGraphPass):  # type: ignore[misc]
    """``inner`` run as it is, its edits recorded."""

    def __init__(self, inner: Callable[..., Any], slot: str, watch: PassWatch) -> None:
        self.inner, self.slot, self.watch = inner, slot, watch

    def __call__(self, graph: torch.fx.Graph, *args: Any, **kwargs: Any) -> Any:
        before = snapshot(graph)
        out = self.inner(graph, *args, **kwargs)
        removed, added, rewired = diff(before, snapshot(graph))
        if removed or added or rewired:
            name = type(self.inner).__name__ if not isinstance(self.inner, type) else self.inner.__name__
            if name == "function":
                name = getattr(self.inner, "__qualname__", name)
            self.watch.edits.append(PassEdit(self.watch.region_index(), self.slot, name, removed, added, rewired))
        return out

    def uuid(self) -> Any:
        uuid = getattr(self.inner, "uuid", None)
        return uuid() if callable(uuid) else None


@dataclass
class PassWatch:
    """Records each custom post-grad pass's edits; ``region_index()`` says which region is compiling."""

    region_index: Callable[[], int]
    edits: list[PassEdit] = field(default_factory=list)

    def wrap(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` with every pass of :data:`PASS_SLOTS` wrapped (the same passes, run the same way)."""
        out = dict(options)
        for slot in PASS_SLOTS:
            value = out.get(slot)
            if value is None:
                continue
            passes = list(value) if isinstance(value, (list, tuple)) else [value]
            out[slot] = [p if isinstance(p, _Watched) else _Watched(p, slot, self) for p in passes]
        return out

    def in_region(self, region: int) -> list[PassEdit]:
        return [e for e in self.edits if e.region == region]


__all__ = ["PASS_SLOTS", "NodeInfo", "PassEdit", "PassWatch", "diff", "snapshot"]
