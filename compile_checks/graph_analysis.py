"""Pure analysis of FX graphs: which mutated arguments Inductor failed to re-inplace.

Two views of one compiled region are analysed:

* the graph *before* the reinplace pass, where each mutating op is still an
  ``auto_functionalized`` / ``auto_functionalized_v2`` node; after the pass
  the node carries ``meta["only_clone_these_tensors"]`` (v2: base indices into
  ``_all_bases``; v1: argument names): :func:`functionalized_calls`.
* the final post-grad graph, after ``decompose_auto_functionalized``, where a
  surviving clone is an ``aten.clone`` of (an ``as_strided`` view of) a graph
  input whose result (possibly through views) is passed as a *mutated*
  argument of a mutating op: :func:`find_clone_sites`.

Nothing here compiles or runs anything, so hand-built graphs can be analysed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.fx

AUTO_FUNCTIONALIZED_TARGETS: tuple[object, ...] = (
    torch.ops.higher_order.auto_functionalized,
    torch.ops.higher_order.auto_functionalized_v2,
)
_CLONE_TARGETS: tuple[object, ...] = (torch.ops.aten.clone.default,)


@dataclass(frozen=True)
class TensorGeometry:
    """Where a tensor lives inside its storage, in elements (concrete ints)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def element_span(self) -> tuple[int, int]:
        """Half-open element range ``[lo, hi)`` of the storage the view can touch."""
        if self.numel == 0:
            return (self.storage_offset, self.storage_offset)
        hi = self.storage_offset + sum((s - 1) * st for s, st in zip(self.shape, self.stride)) + 1
        return (self.storage_offset, hi)


@dataclass(frozen=True)
class CloneSite:
    """A clone in the final graph that stands in for a mutated graph input.

    ``view_offset_in_clone`` / ``view`` describe the tensor the op receives
    relative to the clone's storage; ``clone_source_offset`` is where the cloned
    buffer starts in the input's storage, so the op's view maps back to the
    input storage at ``clone_source_offset + view.storage_offset`` (when the
    input itself was cloned, ``clone_is_input``, the runtime input's own offset
    replaces ``clone_source_offset``).
    """

    op: str
    arg: str
    clone_node: str
    placeholder: str
    placeholder_index: int
    clone: TensorGeometry
    view: TensorGeometry | None
    clone_source_offset: int | None
    clones_whole_input: bool
    clone_is_input: bool = False


@dataclass(frozen=True)
class FunctionalizedArg:
    """One mutated argument of one ``auto_functionalized*`` call, before/after reinplacing."""

    node: str
    op: str
    arg: str
    version: str  # "v1" | "v2"
    base: str | None  # the graph node of the (base) tensor being mutated
    placeholder_index: int | None  # index of that base if it is a graph input
    cloned: bool | None  # None until the reinplace pass has set only_clone_these_tensors
    # the argument's view inside the base's storage when known (v2 size/stride/offset kwargs,
    # v1 the argument's meta["val"]); tells kv[0] from kv[1] when both share one base input
    view: TensorGeometry | None = None


def _concrete(x: object) -> int:
    """An int for a (possibly symbolic) size: its hint, never a new guard."""
    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        if hint is None:
            raise ValueError(f"symbolic size {x} has no hint")
        return int(hint)
    return int(x)  # type: ignore[call-overload]


def geometry_of(value: object) -> TensorGeometry | None:
    """Geometry of a node's ``meta["val"]`` (a fake tensor), None if not a tensor."""
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return TensorGeometry(
            shape=tuple(_concrete(s) for s in value.shape),
            stride=tuple(_concrete(s) for s in value.stride()),
            storage_offset=_concrete(value.storage_offset()),
            dtype=value.dtype,
        )
    except (ValueError, RuntimeError):
        return None


def op_name(target: object) -> str:
    """``namespace::name`` of an OpOverload (``ar_paging::paged_write``), else str(target)."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return str(schema.name)
    return str(target)


def mutated_arg_names(target: object) -> list[str]:
    """Names of the schema arguments an op writes (``alias_info.is_write``)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return []
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def _is_view_op(target: object) -> bool:
    """An op whose output aliases its first input without writing it (view / as_strided / ...)."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns or not schema.arguments:
        return False
    ret = schema.returns[0].alias_info
    first = schema.arguments[0].alias_info
    return ret is not None and not ret.is_write and first is not None and not first.is_write


def _view_chain_root(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]]:
    """Follow view ops back to the first non-view node; returns (root, chain root-first)."""
    chain: list[torch.fx.Node] = []
    cur = node
    while cur.op == "call_function" and _is_view_op(cur.target) and cur.args and isinstance(cur.args[0], torch.fx.Node):
        chain.append(cur)
        cur = cur.args[0]
    chain.reverse()
    return cur, chain


def _bound_args(node: torch.fx.Node) -> dict[str, object]:
    """Schema argument name -> value (positional and keyword) of an OpOverload call."""
    schema = node.target._schema  # type: ignore[union-attr]
    bound: dict[str, object] = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args):
            bound[a.name] = node.args[i]
        elif a.name in node.kwargs:
            bound[a.name] = node.kwargs[a.name]
    return bound


def _flatten_nodes(value: object) -> list[torch.fx.Node]:
    if isinstance(value, torch.fx.Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _flatten_nodes(v)]
    return []


def placeholder_indices(graph: torch.fx.Graph) -> dict[torch.fx.Node, int]:
    """Placeholder node -> its position among the graph's inputs."""
    return {n: i for i, n in enumerate(n for n in graph.nodes if n.op == "placeholder")}


def _clone_source_offset(clone_input: torch.fx.Node, placeholder: torch.fx.Node) -> tuple[int | None, bool]:
    """Offset of the cloned buffer in the input's storage, and whether it spans the whole input storage.

    The decomposition clones ``as_strided(base, [numel], [1], offset)`` (v2 and the
    aliased-input case of v1) or the input itself.
    """
    if clone_input is placeholder:
        geo = geometry_of(placeholder.meta.get("val"))
        return (geo.storage_offset if geo else None), False
    geo = geometry_of(clone_input.meta.get("val"))
    if geo is None:
        return None, False
    base = geometry_of(placeholder.meta.get("val"))
    whole = False
    if base is not None and clone_input.target is torch.ops.aten.as_strided.default:
        lo, hi = geo.element_span()
        blo, bhi = base.element_span()
        whole = lo <= blo and hi >= bhi and geo.numel > base.numel
    return geo.storage_offset, whole


def mutated_inputs(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Graph inputs the program mutates: AOT writes them back with an ``aten.copy_`` epilogue."""
    out: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.copy_.default and node.args:
            dst = node.args[0]
            if isinstance(dst, torch.fx.Node):
                root, _ = _view_chain_root(dst)
                if root.op == "placeholder":
                    out.add(root)
    return out


def find_clone_sites(
    graph: torch.fx.Graph,
    preexisting: Iterable[torch.fx.Node] | None = None,
) -> list[CloneSite]:
    """Clones of graph inputs that feed a mutated argument of a mutating op.

    Only inputs the program mutates count (they have a ``copy_`` write-back epilogue): a
    clone of an input the program never mutates is a copy the user asked for (``x.clone()``).

    Args:
        graph: the final post-grad graph (after ``decompose_auto_functionalized``).
        preexisting: nodes that already existed before reinplacing; a clone among
            them is the user's own (``x.clone()``), not a functionalization copy.
    """
    old = set(preexisting) if preexisting is not None else set()
    inputs = placeholder_indices(graph)
    written_back = mutated_inputs(graph)
    sites: list[CloneSite] = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target in AUTO_FUNCTIONALIZED_TARGETS:
            continue
        written = mutated_arg_names(node.target)
        if not written:
            continue
        bound = _bound_args(node)
        for arg in written:
            for passed in _flatten_nodes(bound.get(arg)):
                clone_node, _ = _view_chain_root(passed)
                if clone_node.op != "call_function" or clone_node.target not in _CLONE_TARGETS:
                    continue
                if clone_node in old or not clone_node.args or not isinstance(clone_node.args[0], torch.fx.Node):
                    continue
                clone_input = clone_node.args[0]
                root, _ = _view_chain_root(clone_input)
                if root.op != "placeholder":
                    continue  # a clone of an intermediate: not a copy of a caller's buffer
                if root not in written_back:
                    continue  # the program never mutates this input: the copy is the user's own
                clone_geo = geometry_of(clone_node.meta.get("val"))
                if clone_geo is None:
                    continue
                offset, whole = _clone_source_offset(clone_input, root)
                sites.append(
                    CloneSite(
                        op=op_name(node.target),
                        arg=arg,
                        clone_node=clone_node.name,
                        placeholder=root.name,
                        placeholder_index=inputs[root],
                        clone=clone_geo,
                        view=geometry_of(passed.meta.get("val")),
                        clone_source_offset=offset,
                        clones_whole_input=whole,
                        clone_is_input=clone_input is root,
                    )
                )
    return sites


def _v2_arg_bases(node: torch.fx.Node, arg: str) -> list[int | None]:
    """Base indices (into ``_all_bases``) of a v2 mutated argument (a list for Tensor[] args)."""
    kw = node.kwargs
    if f"_{arg}_base_index" in kw:
        return [kw[f"_{arg}_base_index"]]  # type: ignore[list-item]
    out: list[int | None] = []
    i = 0
    while f"_{arg}_{i}_base_index" in kw:
        out.append(kw[f"_{arg}_{i}_base_index"])  # type: ignore[arg-type]
        i += 1
    return out


def _v2_view(node: torch.fx.Node, prefix: str, base: object) -> TensorGeometry | None:
    """Geometry of a v2 argument: explicit as_strided kwargs, else the base itself when no view info."""
    kw = node.kwargs
    base_geo = geometry_of(base.meta.get("val")) if isinstance(base, torch.fx.Node) else None
    if f"{prefix}_storage_offset" in kw and base_geo is not None:
        try:
            return TensorGeometry(
                shape=tuple(_concrete(x) for x in kw[f"{prefix}_size"]),  # type: ignore[union-attr]
                stride=tuple(_concrete(x) for x in kw[f"{prefix}_stride"]),  # type: ignore[union-attr]
                storage_offset=_concrete(kw[f"{prefix}_storage_offset"]),
                dtype=base_geo.dtype,
            )
        except (ValueError, TypeError):
            return None
    if any(k.startswith(f"{prefix}_slice") for k in kw):
        return None
    return base_geo


def functionalized_calls(graph: torch.fx.Graph) -> list[FunctionalizedArg]:
    """Every mutated argument of every ``auto_functionalized*`` node, with its clone decision.

    Run on the graph after the reinplace pass (``cloned`` is then filled from
    ``meta["only_clone_these_tensors"]``) but before the decomposition removes the nodes.
    """
    inputs = placeholder_indices(graph)
    out: list[FunctionalizedArg] = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in AUTO_FUNCTIONALIZED_TARGETS:
            continue
        mutable_op = node.args[0]
        name = op_name(mutable_op)
        decided = "only_clone_these_tensors" in node.meta
        to_clone = node.meta.get("only_clone_these_tensors") or []
        v2 = node.target is torch.ops.higher_order.auto_functionalized_v2
        for arg in mutated_arg_names(mutable_op):
            if v2:
                bases = node.kwargs.get("_all_bases", [])
                idxs = _v2_arg_bases(node, arg)
                prefixes = [f"_{arg}"] if f"_{arg}_base_index" in node.kwargs else [f"_{arg}_{i}" for i in range(len(idxs))]
                for idx, prefix in zip(idxs, prefixes):
                    if idx is None:
                        continue
                    base = bases[idx]
                    root, _ = _view_chain_root(base) if isinstance(base, torch.fx.Node) else (None, [])
                    out.append(
                        FunctionalizedArg(
                            node=node.name, op=name, arg=arg, version="v2",
                            base=base.name if isinstance(base, torch.fx.Node) else None,
                            placeholder_index=inputs.get(root) if root is not None else None,
                            cloned=(idx in to_clone) if decided else None,
                            view=_v2_view(node, prefix, base),
                        )
                    )
            else:
                for base in _flatten_nodes(node.kwargs.get(arg)):
                    root, _ = _view_chain_root(base)
                    out.append(
                        FunctionalizedArg(
                            node=node.name, op=name, arg=arg, version="v1", base=base.name,
                            placeholder_index=inputs.get(root),
                            cloned=(arg in to_clone) if decided else None,
                            view=geometry_of(base.meta.get("val")),
                        )
                    )
    return out


def node_line(source: str, node_name: str) -> int | None:
    """1-based line where ``node_name`` is assigned in a dumped graph's source (for file:line)."""
    pat = re.compile(rf"^\s*{re.escape(node_name)}\s*(:[^=]*)?=")
    for i, line in enumerate(source.splitlines(), start=1):
        if pat.match(line):
            return i
    return None


def layer_of(pool_name: str | None) -> int | None:
    """Layer index in a pool name: ``"layer3.v"`` / ``"layers.3.k"`` / ``"blocks[3]"`` -> 3."""
    if not pool_name:
        return None
    m = re.search(r"(?:layer|layers|block|blocks|l)[._\[]?(\d+)", pool_name, flags=re.IGNORECASE)
    if m:
        return int(m.group(1))
    m = re.search(r"(\d+)", pool_name)
    return int(m.group(1)) if m else None


__all__ = [
    "AUTO_FUNCTIONALIZED_TARGETS",
    "CloneSite",
    "FunctionalizedArg",
    "TensorGeometry",
    "find_clone_sites",
    "functionalized_calls",
    "geometry_of",
    "layer_of",
    "mutated_arg_names",
    "node_line",
    "op_name",
    "placeholder_indices",
]
