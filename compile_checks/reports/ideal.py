"""The ideal bytes of a user's case, derived from its compiled graphs (no model formulas).

The ideal is the engine's work, whatever spelling its graph uses: per call of a compiled
region, (a) the values its writes store into the pools (the chunk's K/V) and (b) the window
it reads from them. Both are in the final post-grad graph of each compiled region:

* writes: for every op call that mutates a graph input (a custom op such as
  ``paged_write``, ``index_put_``, ``index_copy_``, ``copy_`` into a slice...), the
  bytes of its non-mutated tensor arguments of the pool's dtype (the values it
  stores). A ``copy_`` of a functional write of the same pool (``index_put`` left
  functional, then copied back) stores that write's values, not the whole pool; a
  ``copy_`` whose source is a clone is the copy-back of a surviving clone: extra
  traffic, accounted in :mod:`compile_checks.reports.accounting`, not here.
* reads: the output bytes of every gather (``index``, ``index_select``, ``gather``,
  ``embedding``) whose source is a pool (a graph input, a view, clone or written
  version of one), less the rows this call wrote into that pool before the gather
  when the gather's index is built from the write's slots: a window gathered *after*
  the commit (write first, then read window + chunk) reads the chunk back, which the
  engine already holds; its window read is the rest.

So ``paged_write`` or ATen ``k[slots] = ...``, before or after the window gather, give
one ideal for one traffic (``tests/test_reports_ideal.py``). A write repeated every
call (a write-first spelling that re-writes the chunk at every denoising step) counts
at every call: the graph cannot tell that the rows are the same; set
``Case.ideal_bytes_per_call`` to state the ideal outright.

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
# functional writes: a new tensor = the first argument with some rows replaced (same pool, new version)
FUNCTIONAL_WRITE_OPS: frozenset[str] = frozenset(
    {"aten::index_put", "aten::_unsafe_index_put", "aten::index_copy", "aten::scatter", "aten::slice_scatter"}
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


def _returns_written_self(target: Any) -> bool:
    """An in-place op whose output is its mutated first argument (``index_put_``, ``copy_``...)."""
    schema = _schema(target)
    if schema is None or not schema.returns or not schema.arguments:
        return False
    ret, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return ret is not None and ret.is_write and first is not None and first.is_write


def _pool_of(node: Any) -> Any:
    """The graph input (pool) a value is a view, clone or written version of; None when it is none."""
    import torch.fx

    while node.op == "call_function" and node.args and isinstance(node.args[0], torch.fx.Node):
        name = str(getattr(_schema(node.target), "name", ""))
        if not (
            _is_view(node.target)
            or _is_clone(node)
            or _returns_written_self(node.target)
            or name in FUNCTIONAL_WRITE_OPS
        ):
            break
        node = node.args[0]
    return node if node.op == "placeholder" else None


def _stored_values(pairs: list[tuple[Any, Any]], mutated: list[Any]) -> tuple[int, bool]:
    """Bytes of the values a write stores: its non-mutated tensor arguments of the pool's dtype."""
    import torch.fx

    dtypes = {v.meta["val"].dtype for v in mutated if "val" in v.meta}
    total, symbolic = 0, False
    for _a, v in pairs:
        if (
            isinstance(v, torch.fx.Node)
            and v not in mutated
            and "val" in v.meta
            and getattr(v.meta["val"], "dtype", None) in dtypes
        ):
            n, sym = _nbytes(v)
            total, symbolic = total + n, symbolic or sym
    return total, symbolic


def _index_nodes(args: Any) -> set[Any]:
    """The integer tensor arguments (slots, indices) among ``args``, lists flattened."""
    import torch
    import torch.fx

    found: set[Any] = set()
    for a in args:
        for v in a if isinstance(a, (list, tuple)) else (a,):
            val = v.meta.get("val") if isinstance(v, torch.fx.Node) else None
            if isinstance(val, torch.Tensor) and not val.dtype.is_floating_point and val.dtype != torch.bool:
                found.add(v)
    return found


def _ancestors(nodes: set[Any]) -> set[Any]:
    seen, todo = set(nodes), list(nodes)
    while todo:
        for parent in todo.pop().all_input_nodes:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def graph_ideal(graph: Any) -> GraphIdeal:
    """The write and read bytes one call of ``graph`` must move (see the module docstring)."""
    import torch.fx

    write = read = 0
    symbolic = False
    # pool placeholder -> [slots nodes of a write, bytes it stored there not yet read back]
    written: dict[Any, list[list[Any]]] = {}
    for node in graph.nodes:
        if node.op != "call_function" or _schema(node.target) is None:
            continue
        name = str(_schema(node.target).name)
        if name in GATHER_OPS and node.args and isinstance(node.args[0], torch.fx.Node):
            pool = _pool_of(node.args[0])
            if pool is not None:  # a gather from a pool, a surviving clone or a written version of it
                n, sym = _nbytes(node)
                read, symbolic = read + n, symbolic or sym
                index_from = _ancestors(_index_nodes(node.args[1:])) if pool in written else set()
                for entry in written.get(pool, []):
                    if entry[0] & index_from:  # the chunk this call wrote, read back by its own slots
                        back = min(n, entry[1])
                        entry[1] -= back
                        read -= back
            continue
        pairs = _bound(node)
        mutated: list[Any] = [
            v for a, v in pairs if a.alias_info is not None and a.alias_info.is_write and isinstance(v, torch.fx.Node)
        ]
        roots = [_root(v) for v in mutated]
        if not mutated or not any(r.op == "placeholder" or _is_clone(r) for r in roots):
            continue  # writes only an intermediate: not pool traffic
        source = node.args[1] if name == "aten::copy_" and len(node.args) > 1 else None
        if isinstance(source, torch.fx.Node) and _is_clone(_root(source)):
            continue  # the copy-back of a surviving clone: extra, not ideal
        writer, values = node, pairs
        if (
            isinstance(source, torch.fx.Node)
            and str(getattr(_schema(source.target), "name", "")) in FUNCTIONAL_WRITE_OPS
            and _pool_of(source) is not None
            and _pool_of(source) == _pool_of(node.args[0])
        ):
            # a functional write of this pool copied back: it stores that write's values
            writer, values = source, [(None, v) for _a, v in _bound(source)[1:]]
            mutated = [source.args[0]]
        n, sym = _stored_values(values, mutated)
        write, symbolic = write + n, symbolic or sym
        pools = [p for p in (_pool_of(v) for v in mutated) if p is not None]
        slots = _index_nodes(writer.args[1:])
        for p in pools:  # the values split evenly over the pools written (paged_write: new_k -> k, new_v -> v)
            written.setdefault(p, []).append([slots, n // len(pools)])
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
