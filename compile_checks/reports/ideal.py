"""The ideal bytes of a user's case, derived from its compiled graphs (no model formulas).

Whatever the pool layout, a step must at least (a) write what its mutating ops
write into the pools and (b) read what its gathers read from them. Both are in the
final post-grad graph of each compiled region:

* writes: for every op call that mutates a graph input (a custom op such as
  ``paged_write``, ``index_put_``, ``index_copy_``, ``copy_`` into a slice...), the
  bytes of its non-mutated tensor arguments of the pool's dtype (the values it
  stores). A ``copy_`` whose source is a clone is the copy-back of a surviving
  clone: extra traffic, accounted in :mod:`compile_checks.reports.accounting`, not here.
* reads: the output bytes of every gather (``index``, ``index_select``, ``gather``,
  ``embedding``) whose source is a graph input (or a view of one).

:func:`record_final_graphs` collects this per compiled region while a case runs;
:func:`ideal_bytes_per_run` weights it by the region's calls. Sizes of dynamic
graphs are the compile-time hints (one graph serves several sizes): then the result
is an estimate and says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

GATHER_OPS: frozenset[str] = frozenset(
    {"aten::index", "aten::index_select", "aten::gather", "aten::embedding", "aten::_unsafe_index"}
)


@dataclass(frozen=True)
class GraphIdeal:
    """What one call of one compiled region must move at best."""

    write_bytes: int
    read_bytes: int
    symbolic: bool = False  # sizes taken from compile-time hints (dynamic shapes)

    @property
    def total(self) -> int:
        return self.write_bytes + self.read_bytes


@dataclass
class FinalGraphs:
    """Top-level final graphs in compile order (one per compiled region for inference)."""

    ideals: list[GraphIdeal] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _size(x: Any) -> tuple[int, bool]:
    """(int, symbolic?) for a possibly symbolic size: its hint, never a new guard."""
    import torch

    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        if hint is None:
            raise ValueError(f"symbolic size {x} has no hint")
        return int(hint), True
    return int(x), False


def _nbytes(node: Any) -> tuple[int, bool]:
    """Bytes of a node's tensor value (0 for non-tensors) and whether a size was symbolic."""
    import torch

    val = node.meta.get("val") if hasattr(node, "meta") else None
    if not isinstance(val, torch.Tensor):
        return 0, False
    n, symbolic = 1, False
    for s in val.shape:
        v, sym = _size(s)
        n, symbolic = n * v, symbolic or sym
    return n * val.element_size(), symbolic


def _schema(target: Any) -> Any:
    return getattr(target, "_schema", None)


def _is_view(target: Any) -> bool:
    """Output aliases the first input without writing it (view, as_strided, select, slice...)."""
    schema = _schema(target)
    if schema is None or not schema.returns or not schema.arguments:
        return False
    ret, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return ret is not None and not ret.is_write and first is not None and not first.is_write


def _root(node: Any) -> Any:
    """Follow view ops back to the first non-view node."""
    import torch.fx

    while (
        node.op == "call_function" and _is_view(node.target) and node.args and isinstance(node.args[0], torch.fx.Node)
    ):
        node = node.args[0]
    return node


def _is_clone(node: Any) -> bool:
    return node.op == "call_function" and str(getattr(_schema(node.target), "name", "")) == "aten::clone"


def _bound(node: Any) -> list[tuple[Any, Any]]:
    """(schema argument, value) pairs of an OpOverload call."""
    schema = _schema(node.target)
    pairs = list(zip(schema.arguments, node.args))
    by_name = {a.name: a for a in schema.arguments}
    pairs += [(by_name[k], v) for k, v in node.kwargs.items() if k in by_name]
    return pairs


def graph_ideal(graph: Any) -> GraphIdeal:
    """The write and read bytes one call of ``graph`` must move (see the module docstring)."""
    import torch.fx

    write = read = 0
    symbolic = False
    for node in graph.nodes:
        if node.op != "call_function" or _schema(node.target) is None:
            continue
        name = str(_schema(node.target).name)
        if name in GATHER_OPS and node.args and isinstance(node.args[0], torch.fx.Node):
            source = _root(node.args[0])
            if source.op == "placeholder" or (_is_clone(source) and _root(source.args[0]).op == "placeholder"):
                # a gather from a surviving clone of a pool still reads the window once: ideal
                n, sym = _nbytes(node)
                read, symbolic = read + n, symbolic or sym
            continue
        pairs = _bound(node)
        mutated = [
            v for a, v in pairs if a.alias_info is not None and a.alias_info.is_write and isinstance(v, torch.fx.Node)
        ]
        roots = [_root(v) for v in mutated]
        if not mutated or not any(r.op == "placeholder" or _is_clone(r) for r in roots):
            continue  # writes only an intermediate: not pool traffic
        if name == "aten::copy_" and isinstance(node.args[1], torch.fx.Node) and _is_clone(_root(node.args[1])):
            continue  # the copy-back of a surviving clone: extra, not ideal
        dtypes = {v.meta["val"].dtype for v in mutated if "val" in v.meta}
        for _a, v in pairs:
            if (
                isinstance(v, torch.fx.Node)
                and v not in mutated
                and "val" in v.meta
                and getattr(v.meta["val"], "dtype", None) in dtypes
            ):
                n, sym = _nbytes(v)
                write, symbolic = write + n, symbolic or sym
    return GraphIdeal(write, read, symbolic)


@contextlib.contextmanager
def record_final_graphs() -> Iterator[FinalGraphs]:
    """Record :func:`graph_ideal` of every top-level final post-grad graph compiled inside.

    Wraps Inductor's ``_recursive_post_grad_passes`` (one call per compiled graph, after
    which the graph is final); the clone check's own hooks run inside it, and its
    analysis-only stop (raised from the last pass) still leaves a final graph to read.
    """
    from unittest import mock

    import torch._inductor.compile_fx as compile_fx_module

    found = FinalGraphs()
    original = compile_fx_module._recursive_post_grad_passes

    def recording(gm: Any, is_inference: bool = False) -> None:
        try:
            original(gm, is_inference)
        finally:
            try:
                found.ideals.append(graph_ideal(gm.graph))
            except (ValueError, RuntimeError, KeyError, AttributeError) as e:
                found.errors.append(f"{type(e).__name__}: {e}")

    with mock.patch.object(compile_fx_module, "_recursive_post_grad_passes", recording):
        yield found


def ideal_bytes_per_run(
    graphs: FinalGraphs, region_calls: Mapping[int, int], num_regions: int
) -> tuple[int | None, str]:
    """Ideal bytes over the run and how they were obtained; None (with why) when not derivable."""
    if graphs.errors:
        return None, f"not derivable: {graphs.errors[0]}"
    if len(graphs.ideals) != num_regions:
        # e.g. a region split into several graphs (piecewise): the calls of each are unknown
        return None, f"not derivable: {len(graphs.ideals)} final graphs for {num_regions} compiled regions"
    total = sum(g.total * int(region_calls.get(i, 0)) for i, g in enumerate(graphs.ideals))
    how = "graph (hints of dynamic sizes)" if any(g.symbolic for g in graphs.ideals) else "graph"
    return total, how


def case_ideal_per_run(
    ideal_bytes_per_call: int | None, calls: int, derived: tuple[int | None, str]
) -> tuple[int | None, str]:
    """The case's own ``ideal_bytes_per_call`` x calls when it sets one, else the derived bytes."""
    if ideal_bytes_per_call is not None:
        return int(ideal_bytes_per_call) * calls, "case"
    return derived


__all__ = [
    "FinalGraphs",
    "GraphIdeal",
    "case_ideal_per_run",
    "graph_ideal",
    "ideal_bytes_per_run",
    "record_final_graphs",
]
