"""The live check's explanation of a logged copy: Inductor's reinplace rules replayed on AOT's logged graph.

The gate explains a copy from the graph as Inductor's reinplace pass received it
(:func:`~compile_checks.explain.refusals.replay.explain_refusals`, recorded by
:class:`~compile_checks.explain.culprit_pass.PostGradRecorder`), then
:func:`~compile_checks.explain.explanations.explain_clone` turns the refusal behind the copy into the
user's explanation. A trace holds AOT's graph (``aot_inference_graph``): the functionalized graph the
post-grad passes start from. This module rebuilds from it the same :class:`GraphRecord` (refusals, and
the post-grad graph's clone nodes mapped onto them as the recorder maps them), so the scan calls the same
``explain_clone`` for each copy: one copy, one cause, whichever command finds it.

The logged text gives each value its sizes and strides but not which values share a storage; the rules
need it (a view of a graph input is the input's storage; two inputs Dynamo saw as views of one allocation
are one storage). So inputs Dynamo describes in one storage become views of one meta allocation, and every
view op's value is recomputed from its base's (the view shares the base's storage, at its real offset). What the text
cannot give (a post-grad pass that reorders nodes before the reinplace pass) is not invented: the culprit
pass of a read moved below the write is the live check's to find.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import operator
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx
from torch._inductor.fx_passes import reinplace as inductor_reinplace
from torch._subclasses.fake_tensor import FakeTensor

from compile_checks.explain.culprit_pass import GraphRecord, PassStep, find_culprit, map_clones
from compile_checks.explain.explanations import UNNAMED_PASS
from compile_checks.explain.refusals.replay import explain_refusals
from compile_checks.explain.refusals.rules import AF_V1, AF_V2
from compile_checks.scan.fx_text import GraphTextError, UnknownOp, parse_graph
from compile_checks.vocab import Cause

AOT_GRAPH_PASS = "aot_graph"  # the one "pass" of a record rebuilt from a trace: AOT's graph as logged


def _val(arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_val(a) for a in arg)
    return arg


def share_input_storages(graph: torch.fx.Graph, storages: Mapping[str, tuple[int, int]]) -> None:
    """Graph inputs Dynamo saw in one storage (``{placeholder: (storage id, storage offset)}``, from its
    ``describe_tensor`` records) made views of one meta allocation at their offsets, as the live check's fake
    inputs are. Inputs with symbolic sizes keep their own storage (nothing is invented about them)."""
    groups: dict[int, list[torch.fx.Node]] = {}
    for node in graph.nodes:
        if node.op == "placeholder" and node.name in storages and isinstance(node.meta.get("val"), torch.Tensor):
            groups.setdefault(storages[node.name][0], []).append(node)
    for nodes in groups.values():
        vals = [n.meta["val"] for n in nodes]
        if len(nodes) < 2 or any(isinstance(v, FakeTensor) or v.device.type != "meta" for v in vals):
            continue
        dtypes = {v.dtype for v in vals}
        if len(dtypes) != 1:
            continue
        spans = [
            storages[n.name][1] + 1 + sum((size - 1) * st for size, st in zip(v.shape, v.stride(), strict=True))
            for n, v in zip(nodes, vals, strict=True)
        ]
        base = torch.empty(max(spans), dtype=dtypes.pop(), device="meta")
        for n, v in zip(nodes, vals, strict=True):
            n.meta["val"] = base.as_strided(v.shape, v.stride(), storages[n.name][1])


def share_view_storages(graph: torch.fx.Graph) -> None:
    """Recompute each view op's value from its base's, so views share their base's storage (in place)."""
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            produced = node.args[0].meta.get("view_values")
            if isinstance(produced, (list, tuple)) and isinstance(node.args[1], int) and node.args[1] < len(produced):
                node.meta["val"] = produced[node.args[1]]
            continue
        if not inductor_reinplace._is_view_op(node.target):
            continue
        args, kwargs = _val(node.args), {k: _val(v) for k, v in node.kwargs.items()}
        base = args[0] if args else None
        if not isinstance(base, torch.Tensor):
            continue
        mode = base.fake_mode if isinstance(base, FakeTensor) else contextlib.nullcontext()
        try:
            with mode:
                out = node.target(*args, **kwargs)
        except Exception:  # an op the meta / fake kernels refuse: its annotated value stays
            continue
        if isinstance(out, torch.Tensor):
            node.meta["val"] = out
        elif isinstance(out, (list, tuple)):
            node.meta["view_values"] = out


def follow_order(graph: torch.fx.Graph, final: torch.fx.Graph) -> None:
    """Reorder ``graph`` (AOT's) as far as its nodes appear in ``final`` (the post-grad graph, same node names
    for what the passes kept): the post-grad passes that run before reinplacing reorder nodes
    (``reorder_for_locality`` moves reads), and the reinplace rules read that order. An ``auto_functionalized``
    call takes the place of its op's call in ``final`` (its decomposition); a node ``final`` lacks goes right
    before its first user there; dependencies always come first (a topological order)."""
    pos: dict[str, float] = {n.name: i for i, n in enumerate(final.nodes)}
    calls: dict[Any, list[int]] = {}  # op -> positions of its calls in ``final`` (a functionalized op's, decomposed)
    for i, n in enumerate(final.nodes):
        if n.op == "call_function":
            calls.setdefault(n.target, []).append(i)
    for n in graph.nodes:  # the k-th auto_functionalized call of an op: the k-th call of that op in ``final``
        if n.op == "call_function" and n.target in (AF_V1, AF_V2) and n.name not in pos and calls.get(n.args[0]):
            pos[n.name] = calls[n.args[0]].pop(0)
    nodes = list(graph.nodes)
    aot = {n: i for i, n in enumerate(nodes)}
    prio: dict[torch.fx.Node, float] = {}
    for n in reversed(nodes):
        if n.op == "placeholder":
            prio[n] = -1.0
        elif n.op == "output":
            prio[n] = float("inf")
        elif n.name in pos:
            prio[n] = pos[n.name]
        else:
            prio[n] = min((prio[u] for u in n.users), default=len(pos) + aot[n])
    waiting = {n: len(n.all_input_nodes) for n in nodes}
    ready = [(prio[n], aot[n], n) for n in nodes if waiting[n] == 0]
    heapq.heapify(ready)
    order: list[torch.fx.Node] = []
    while ready:
        *_, n = heapq.heappop(ready)
        order.append(n)
        for u in n.users:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (prio[u], aot[u], u))
    if len(order) != len(nodes):
        return  # not a DAG as read: keep AOT's order
    for prev, n in itertools.pairwise(order):
        prev.append(n)


def trace_record(
    aot_graph: str | None,
    post_grad: torch.fx.Graph,
    region: int,
    storages: Mapping[str, tuple[int, int]] | None = None,
) -> GraphRecord | None:
    """The :class:`GraphRecord` the live check would have made of this compile, from AOT's logged graph
    (None when none is logged or it cannot be replayed: the scan then explains from the post-grad graph).
    ``storages``: each input's storage as Dynamo described it (placeholder -> (storage id, offset))."""
    if not aot_graph:
        return None
    try:
        graph = parse_graph(aot_graph).graph
    except GraphTextError:
        return None
    if any(isinstance(n.target, UnknownOp) for n in graph.nodes):
        return None  # an op whose schema is unknown: which argument it writes is unknowable
    share_input_storages(graph, storages or {})
    share_view_storages(graph)
    logged = tuple(n.name for n in graph.nodes)
    follow_order(graph, post_grad)
    try:
        refusals = explain_refusals(graph)
    except Exception:  # a graph the rules cannot read (a value the text did not annotate)
        return None
    record = GraphRecord(region=region, ordinal=0, refusals=refusals)
    record.placeholders = {n.name: i for i, n in enumerate(n for n in graph.nodes if n.op == "placeholder")}
    record.passes = [PassStep(AOT_GRAPH_PASS, logged, tuple(n.name for n in graph.nodes))]
    for i, r in enumerate(refusals):  # a read the passes moved below the write: by a pass the trace does not name
        if r.cause == Cause.READ_AFTER_WRITE and any(find_culprit(record.passes, x.node, r.node) for x in r.readers):
            record.culprits[i] = UNNAMED_PASS
    map_clones(post_grad, record)
    return record


__all__ = ["AOT_GRAPH_PASS", "follow_order", "share_input_storages", "share_view_storages", "trace_record"]
