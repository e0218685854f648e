"""Inductor's ``can_inplace``, replayed on one mutated argument: the rule that refuses it, with evidence.

Apart from the walk over the graph (:mod:`.replay`) because this is the transcription of
``reinplace_inplaceable_ops_core``'s per-argument rules and the facts it computes up front
(:class:`GraphFacts`), kept in Inductor's order so a torch upgrade is diffed rule by rule.
Inductor's own helpers (storage of a node, view bases, the copy-back layout check) are used as
they are, so the replay sees what the pass saw.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.fx
from torch._inductor.fx_passes import reinplace as inductor_reinplace
from torch._inductor.fx_utils import get_node_storage

from compile_checks.check.graph.sites import is_view_scatter, scattered_source
from compile_checks.explain.refusals.records import op_label
from compile_checks.vocab import Cause

AF_V1 = torch.ops.higher_order.auto_functionalized
AF_V2 = torch.ops.higher_order.auto_functionalized_v2
PLACEHOLDERS = ("placeholder", "get_attr")


def node_storages(arg: Any) -> list[Any]:
    """The fake-tensor storage of a node, or of each node of a list argument."""
    if isinstance(arg, (list, tuple)):
        return [get_node_storage(a) for a in arg]
    return [get_node_storage(arg)]


def view_base(node: torch.fx.Node) -> torch.fx.Node:
    """The node under a chain of views (Inductor's ``_get_view_base``)."""
    return inductor_reinplace._get_view_base(node)


def _consumer(user: torch.fx.Node) -> torch.fx.Node:
    """The first non-view consumer below ``user``: the read a view leads to (``index`` of a reshape)."""
    cur = user
    while inductor_reinplace._is_view_op(cur.target) and cur.users:
        cur = next(iter(cur.users))
    return cur


@dataclass
class GraphFacts:
    """What ``reinplace_inplaceable_ops_core`` computes up front, kept for the replay."""

    graph: torch.fx.Graph
    node_order: dict[torch.fx.Node, int] = field(default_factory=dict)
    storage_to_nodes: dict[Any, list[torch.fx.Node]] = field(default_factory=lambda: defaultdict(list))
    copy_nodes: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)  # input -> its first copy_
    copy_via_views: dict[tuple[torch.fx.Node, torch.fx.Node], torch.fx.Node] = field(default_factory=dict)

    @staticmethod
    def of(graph: torch.fx.Graph) -> GraphFacts:
        facts = GraphFacts(graph)
        nodes = list(graph.nodes)
        for i, node in enumerate(reversed(nodes)):
            facts.node_order[node] = len(nodes) - i - 1
            facts.storage_to_nodes[get_node_storage(node)].append(node)
            if node.target is torch.ops.aten.copy_.default and node.args[0].op in PLACEHOLDERS:
                dst, src = node.args[0], node.args[1]
                facts.copy_nodes[dst] = node  # reversed walk: the first copy_ wins
                base = view_base(src) if isinstance(src, torch.fx.Node) else src
                spec = inductor_reinplace.inplaceable_ops.get(getattr(base, "target", None))  # type: ignore[arg-type]
                if base is not src and spec is not None:
                    for idx in spec.mutated_args:
                        m = base.args[idx]
                        if (
                            isinstance(m, torch.fx.Node)
                            and view_base(m) is dst
                            and inductor_reinplace._is_layout_preserving_view_copy_back(dst, src, m, base)
                        ):
                            facts.copy_via_views[(m, base)] = node
        return facts

    def uses_after(
        self,
        node: torch.fx.Node,
        views: Iterable[torch.fx.Node],
        copy_node: torch.fx.Node | None,
        mutated_arg: torch.fx.Node,
    ) -> list[torch.fx.Node]:
        """Inductor's ``any_use_of_views_after_node``, returning the offending users instead of a bool."""
        loc = self.node_order[node]
        copy_loc = self.node_order[copy_node] if copy_node is not None else None
        found: list[torch.fx.Node] = []
        for view in views:
            for user in view.users:
                user_loc = self.node_order[user]
                if user_loc <= loc:
                    continue  # used before the write: sees the old value either way
                if copy_loc is not None and copy_loc <= user_loc:
                    continue  # after the copy_ epilogue the input holds the new value anyway
                if _meta_only(user):
                    continue  # shape metadata only: reinplacing cannot change it
                if user.target is torch.ops.aten.copy_.default and mutated_arg is user.args[0]:
                    continue  # the buffer is overwritten anyway
                found.append(user)
        return found


def _scatters_back(user: torch.fx.Node, write: torch.fx.Node) -> bool:
    """``user`` is a view scatter whose scattered value is ``write``'s result (through views and the scatters
    of an enclosing view): the write-back of a write through a view, not a read of the old value."""
    return is_view_scatter(user) and scattered_source(user) is write


def _meta_only(node: torch.fx.Node) -> bool:
    if inductor_reinplace._is_view_op(node.target):
        return all(_meta_only(u) for u in node.users)
    return node.target in inductor_reinplace.META_ONLY_OPS


def _overlaps(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    try:
        return len(inductor_reinplace.compute_overlapping_tensors([a.meta["val"], b.meta["val"]])) != 0
    except Exception:
        return True


def refusal_of(facts: GraphFacts, node: torch.fx.Node, mutated: Any) -> tuple[Cause, str, list[torch.fx.Node]] | None:
    """Inductor's ``can_inplace(node, mutated)`` as ``(cause, detail, evidence nodes)``; None: may inplace."""
    if isinstance(mutated, (list, tuple)):
        # two tensors of one list argument alias each other: Inductor clones rather than write one twice
        if len(set(node_storages(mutated))) != len(mutated):
            return Cause.SHARED_STORAGE, "two tensors of the list argument share one storage", list(mutated)
        for m in mutated:
            r = refusal_of(facts, node, m)
            if r is not None:
                return r
        return None
    storage = get_node_storage(mutated)
    if storage is None:
        # no fake tensor storage to reason about: Inductor refuses outright
        return Cause.OTHER, f"`{mutated.name}` has no tensor storage in its fake value", []
    views = [v for v in facts.storage_to_nodes[storage] if _overlaps(mutated, v)]
    if mutated.op in PLACEHOLDERS:
        copy_node = facts.copy_nodes.get(mutated)
        if copy_node is None:
            # no copy_ epilogue: the program does not mutate this input, so its old value must stay
            return (
                Cause.VIEW_NOT_WRITTEN_BACK,
                f"graph input `{mutated.name}` is never written back (no copy_ epilogue)",
                [],
            )
        return _later_uses(facts, node, views, copy_node, mutated)
    if any(v.op in PLACEHOLDERS for v in views):
        # a view of a graph input: only reinplaceable when a later copy_ writes this op's result back
        copy_node = facts.copy_via_views.get((mutated, node))
        base = view_base(mutated)
        if copy_node is None:
            input_copy = facts.copy_nodes.get(base)
            if node.target is AF_V1 and input_copy is not None:
                # v1 functionalization writes the op's new value of the view back as
                # copy_(input, select_scatter(input, new, ...)); Inductor recognises a write-back
                # through views only for its in-place-able ATen ops (copy_args_to_copy_nodes_via_views),
                # never for auto_functionalized, so a view of an input is always cloned under v1
                return Cause.VIEW_OF_INPUT_V1, _v1_view_detail(mutated, base, input_copy), [base]
            return (
                Cause.VIEW_NOT_WRITTEN_BACK,
                (f"`{mutated.name}` is a view of graph input `{base.name}` that no copy_ writes back from this op"),
                [base],
            )
        dst, src = cast(torch.fx.Node, copy_node.args[0]), cast(torch.fx.Node, copy_node.args[1])  # copy_(dst, src)
        if not inductor_reinplace._is_layout_preserving_view_copy_back(dst, src, mutated, node):
            return (
                Cause.VIEW_NOT_WRITTEN_BACK,
                (f"`{mutated.name}` is a view of `{dst.name}` whose write-back does not preserve its layout"),
                [dst],
            )
        return _later_uses(facts, node, views, copy_node, dst)
    return _later_uses(facts, node, views, None, mutated)


def _v1_view_detail(mutated: torch.fx.Node, base: torch.fx.Node, input_copy: torch.fx.Node) -> str:
    src = input_copy.args[1]
    through = op_label(src.target) if isinstance(src, torch.fx.Node) and src.op == "call_function" else "a copy"
    return (
        f"`{mutated.name}` is a view of graph input `{base.name}` mutated under v1 `auto_functionalized`, whose "
        f"new value goes back as `{through}` + `{input_copy.name}`; Inductor's reinplace re-inplaces a view of an "
        "input only when a copy_ writes back a view of an in-place-able ATen op's result, never of an "
        "auto_functionalized one, so it clones it (auto_functionalized_v2 passes the base input itself and "
        "writes it in place)"
    )


def _later_uses(
    facts: GraphFacts,
    node: torch.fx.Node,
    views: list[torch.fx.Node],
    copy_node: torch.fx.Node | None,
    mutated: torch.fx.Node,
) -> tuple[Cause, str, list[torch.fx.Node]] | None:
    users = facts.uses_after(node, views, copy_node, mutated)
    if not users:
        return None
    if mutated.op not in PLACEHOLDERS and all(_scatters_back(u, node) for u in users):
        # the only "reads" are the scatters that put this write's result back into the buffer it is a view of:
        # a write through a view of an intermediate copy of the pool (an earlier write's scatter), not a read
        base = view_base(mutated)
        return (
            Cause.VIEW_NOT_WRITTEN_BACK,
            (
                f"`{mutated.name}` is a view of `{base.name}`, which the graph rebuilds by scattering this write's "
                f"result back (`{users[0].name}`) instead of writing it in place: a write through a view of one "
                "buffer, scattered back into the whole buffer"
            ),
            [base],
        )
    outputs = [u for u in users if u.op == "output"]
    if outputs:
        # the graph returns (a view of) the buffer: the caller would see the write
        return Cause.OUTPUT_ALIAS, f"the graph output aliases `{mutated.name}`", outputs
    readers = [_consumer(u) for u in users]
    return Cause.READ_AFTER_WRITE, f"`{mutated.name}` is read after the write, so its old value must be kept", readers


__all__ = ["AF_V1", "AF_V2", "PLACEHOLDERS", "GraphFacts", "node_storages", "refusal_of", "view_base"]
