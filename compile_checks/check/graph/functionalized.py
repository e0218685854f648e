"""The reinplace pass's decision for each mutated argument of each ``auto_functionalized*`` call.

Read on the graph just after ``reinplace_inplaceable_ops`` (the nodes then carry
``meta["only_clone_these_tensors"]``: v2 base indices into ``_all_bases``, v1 argument
names) and before ``decompose_auto_functionalized`` removes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from compile_checks.check.graph.fx_helpers import (
    flatten_nodes,
    mutated_arg_names,
    op_name,
    placeholder_indices,
    view_chain_root,
)
from compile_checks.check.graph.geometry import TensorGeometry, geometry_of, make_geometry

AUTO_FUNCTIONALIZED_TARGETS: tuple[object, ...] = (
    torch.ops.higher_order.auto_functionalized,
    torch.ops.higher_order.auto_functionalized_v2,
)


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
            return make_geometry(
                kw[f"{prefix}_size"],  # type: ignore[arg-type]
                kw[f"{prefix}_stride"],  # type: ignore[arg-type]
                kw[f"{prefix}_storage_offset"],
                base_geo.dtype,
            )
        except (ValueError, TypeError):
            return None
    if any(k.startswith(f"{prefix}_slice") for k in kw):
        return None  # a slice view: geometry not recorded as as_strided kwargs
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
                prefixes = (
                    [f"_{arg}"] if f"_{arg}_base_index" in node.kwargs else [f"_{arg}_{i}" for i in range(len(idxs))]
                )
                for idx, prefix in zip(idxs, prefixes):
                    if idx is None:
                        continue
                    base = bases[idx]
                    root, _ = view_chain_root(base) if isinstance(base, torch.fx.Node) else (None, [])
                    out.append(
                        FunctionalizedArg(
                            node=node.name,
                            op=name,
                            arg=arg,
                            version="v2",
                            base=base.name if isinstance(base, torch.fx.Node) else None,
                            placeholder_index=inputs.get(root) if root is not None else None,
                            cloned=(idx in to_clone) if decided else None,
                            view=_v2_view(node, prefix, base),
                        )
                    )
            else:
                for base in flatten_nodes(node.kwargs.get(arg)):
                    root, _ = view_chain_root(base)
                    out.append(
                        FunctionalizedArg(
                            node=node.name,
                            op=name,
                            arg=arg,
                            version="v1",
                            base=base.name,
                            placeholder_index=inputs.get(root),
                            cloned=(arg in to_clone) if decided else None,
                            view=geometry_of(base.meta.get("val")),
                        )
                    )
    return out
