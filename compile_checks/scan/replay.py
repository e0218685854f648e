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
need it (a view of a graph input is the input's storage). So every view op's value is recomputed from its
base's (meta / fake tensors: the view shares the base's storage and has its real offset). What the text
cannot give (a post-grad pass that reorders nodes before the reinplace pass) is not invented: the culprit
pass of a read moved below the write is the live check's to find.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any

import torch
import torch.fx
from torch._inductor.fx_passes import reinplace as inductor_reinplace
from torch._subclasses.fake_tensor import FakeTensor

from compile_checks.explain.culprit_pass import GraphRecord, PassStep, map_clones
from compile_checks.explain.refusals.replay import explain_refusals
from compile_checks.scan.fx_text import GraphTextError, UnknownOp, parse_graph

AOT_GRAPH_PASS = "aot_graph"  # the one "pass" of a record rebuilt from a trace: AOT's graph as logged


def _val(arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_val(a) for a in arg)
    return arg


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


def trace_record(aot_graph: str | None, post_grad: torch.fx.Graph, region: int) -> GraphRecord | None:
    """The :class:`GraphRecord` the live check would have made of this compile, from AOT's logged graph
    (None when none is logged or it cannot be replayed: the scan then explains from the post-grad graph)."""
    if not aot_graph:
        return None
    try:
        graph = parse_graph(aot_graph).graph
    except GraphTextError:
        return None
    if any(isinstance(n.target, UnknownOp) for n in graph.nodes):
        return None  # an op whose schema is unknown: which argument it writes is unknowable
    share_view_storages(graph)
    try:
        refusals = explain_refusals(graph)
    except Exception:  # a graph the rules cannot read (a value the text did not annotate)
        return None
    names = tuple(n.name for n in graph.nodes)
    record = GraphRecord(region=region, ordinal=0, refusals=refusals)
    record.placeholders = {n.name: i for i, n in enumerate(n for n in graph.nodes if n.op == "placeholder")}
    record.passes = [PassStep(AOT_GRAPH_PASS, names, names)]
    map_clones(post_grad, record)
    return record


__all__ = ["AOT_GRAPH_PASS", "share_view_storages", "trace_record"]
