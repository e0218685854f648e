"""Why Inductor's reinplace pass kept a copy: its rules, replayed on the graph it saw.

``torch/_inductor/fx_passes/reinplace.py`` (``reinplace_inplaceable_ops_core``) decides,
for every mutated argument of every ``auto_functionalized`` / ``auto_functionalized_v2``
node (and every functional ATen op it knows an in-place twin of), whether the write
may go straight into the buffer or must go into a clone. It records only the decision
(``meta["only_clone_these_tensors"]``). This module replays the same rules, in the same
order, on the same graph, and returns the rule that refused each cloned argument with
its evidence (the other argument, the reading node, the output). Pure: nothing is
compiled, so hand-built graphs can be explained.

Inductor's own helpers (storage of a node, view bases, the copy-back layout check)
are used as they are, so the replay sees what the pass saw.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.fx
from torch._inductor.fx_passes import reinplace as inductor_reinplace
from torch._inductor.fx_utils import get_node_storage

from compile_checks.explain.user_source import user_line, wrapper_line
from compile_checks.vocab import Cause

_AF_V1 = torch.ops.higher_order.auto_functionalized
_AF_V2 = torch.ops.higher_order.auto_functionalized_v2
_PLACEHOLDERS = ("placeholder", "get_attr")


@dataclass(frozen=True)
class Reader:
    """A node that uses the buffer after the write (or the graph output returning it)."""

    node: str
    op: str
    user_line: str | None = None
    wrapper_line: str | None = None  # the library function it read through (``gather_window``), if any


@dataclass(frozen=True)
class Refusal:
    """One mutated argument Inductor would not (or did not) write in place, and why."""

    cause: Cause
    node: str  # the functionalized op node (auto_functionalized* or a functional ATen write)
    op: str  # "ar_paging::paged_write", "aten::index_put"
    args: tuple[str, ...]  # the op's argument name(s) this buffer is passed as ("v_pool",)
    base: str  # graph node of the mutated tensor (a placeholder for a pool passed as input)
    placeholder: str | None  # the graph input under ``base`` (through views), if any
    detail: str  # the rule, in words
    user_line: str | None = None  # the user's line of the mutating call
    wrapper_line: str | None = None  # the library wrapper it went through (innermost), if any
    other_args: tuple[str, ...] = ()  # shared_storage: the argument already written in place
    other_base: str | None = None
    readers: tuple[Reader, ...] = ()  # read_after_write / output_alias
    inductor_log: str | None = None  # Inductor's own "Reinplace for ..." line when captured


def op_label(target: Any) -> str:
    """``ns::name`` for an OpOverload, the HOP's name otherwise."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return str(schema.name)
    return getattr(target, "__name__", None) or str(target)


def _storages(arg: Any) -> list[Any]:
    if isinstance(arg, (list, tuple)):
        return [get_node_storage(a) for a in arg]
    return [get_node_storage(arg)]


def _root(node: torch.fx.Node) -> torch.fx.Node:
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
            if node.target is torch.ops.aten.copy_.default and node.args[0].op in _PLACEHOLDERS:
                dst, src = node.args[0], node.args[1]
                facts.copy_nodes[dst] = node  # reversed walk: the first copy_ wins
                base = _root(src) if isinstance(src, torch.fx.Node) else src
                spec = inductor_reinplace.inplaceable_ops.get(getattr(base, "target", None))  # type: ignore[arg-type]
                if base is not src and spec is not None:
                    for idx in spec.mutated_args:
                        m = base.args[idx]
                        if (
                            isinstance(m, torch.fx.Node)
                            and _root(m) is dst
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
        if len(set(_storages(mutated))) != len(mutated):
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
    if mutated.op in _PLACEHOLDERS:
        copy_node = facts.copy_nodes.get(mutated)
        if copy_node is None:
            # no copy_ epilogue: the program does not mutate this input, so its old value must stay
            return (
                Cause.VIEW_NOT_WRITTEN_BACK,
                f"graph input `{mutated.name}` is never written back (no copy_ epilogue)",
                [],
            )
        return _later_uses(facts, node, views, copy_node, mutated)
    if any(v.op in _PLACEHOLDERS for v in views):
        # a view of a graph input: only reinplaceable when a later copy_ writes this op's result back
        copy_node = facts.copy_via_views.get((mutated, node))
        base = _root(mutated)
        if copy_node is None:
            input_copy = facts.copy_nodes.get(base)
            if node.target is _AF_V1 and input_copy is not None:
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
    outputs = [u for u in users if u.op == "output"]
    if outputs:
        # the graph returns (a view of) the buffer: the caller would see the write
        return Cause.OUTPUT_ALIAS, f"the graph output aliases `{mutated.name}`", outputs
    readers = [_consumer(u) for u in users]
    return Cause.READ_AFTER_WRITE, f"`{mutated.name}` is read after the write, so its old value must be kept", readers


def _candidates(node: torch.fx.Node) -> list[tuple[tuple[str, ...], Any, Any]]:
    """(argument names, mutated tensor(s), the key Inductor's clone list uses) in Inductor's order."""
    if node.target is _AF_V2:
        bases = node.kwargs["_all_bases"]
        names: dict[int, list[str]] = defaultdict(list)
        for k, v in node.kwargs.items():
            m = re.fullmatch(r"_(.+)_base_index(?:_\d+)?", k)
            if m and isinstance(v, int):
                names[v].append(m.group(1))
        return [(tuple(names.get(i, [f"base{i}"])), b, i) for i, b in enumerate(bases)]  # type: ignore[arg-type]
    if node.target is _AF_V1:
        from torch._higher_order_ops.auto_functionalize import get_mutable_args

        mutable, _ = get_mutable_args(cast(torch._ops.OpOverload, node.args[0]))  # the HOP's first arg is the op
        return [((a,), node.kwargs[a], a) for a in mutable if node.kwargs.get(a) is not None]
    spec = inductor_reinplace.inplaceable_ops.get(node.target)  # type: ignore[arg-type]
    if spec is None:
        return []
    schema = node.target._schema  # type: ignore[union-attr]
    return [((schema.arguments[i].name,), node.args[i], i) for i in spec.mutated_args]


def cloned_args(graph: torch.fx.Graph) -> set[tuple[str, tuple[str, ...]]]:
    """(node, argument names) Inductor decided to clone, read off a graph *after* the reinplace pass:
    ``meta["only_clone_these_tensors"]`` of ``auto_functionalized*`` nodes, and functional ATen writes the
    pass left functional (a converted one has its in-place target by then)."""
    out: set[tuple[str, tuple[str, ...]]] = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in (_AF_V1, _AF_V2):
            decided = set(node.meta.get("only_clone_these_tensors") or [])
            out |= {(node.name, names) for names, _, key in _candidates(node) if key in decided}
        elif node.target in inductor_reinplace.inplaceable_ops:
            out |= {(node.name, names) for names, _, _ in _candidates(node)}
    return out


def explain_refusals(graph: torch.fx.Graph) -> list[Refusal]:
    """Replay the reinplace pass on ``graph`` as the pass receives it (before it runs): one
    :class:`Refusal` per mutated argument it must clone, in Inductor's order."""
    facts = GraphFacts.of(graph)
    out: list[Refusal] = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        is_hop = node.target in (_AF_V1, _AF_V2)
        if not is_hop and node.target not in inductor_reinplace.inplaceable_ops:
            continue
        op = op_label(node.args[0] if is_hop else node.target)
        reinplaced: dict[Any, tuple[str, ...]] = {}  # storage -> args already written in place
        for names, mutated, _ in _candidates(node):
            if not isinstance(mutated, (torch.fx.Node, list, tuple)):
                continue
            storages = _storages(mutated)
            earlier = next((reinplaced[s] for s in storages if s in reinplaced), None) if is_hop else None
            if earlier is not None:
                # Inductor's tensor_with_same_storage_already_reinplaced: one buffer cannot be written in
                # place twice by one call, so the second argument on that storage is cloned (and not even
                # counted as a missed opportunity)
                other = next(m for n, m, _ in _candidates(node) if n == earlier)
                verdict: tuple[Cause, str, list[torch.fx.Node]] | None = (
                    Cause.SHARED_STORAGE,
                    f"`{'/'.join(names)}` shares one storage with `{'/'.join(earlier)}`, written in place first",
                    [other] if isinstance(other, torch.fx.Node) else list(other),
                )
            else:
                verdict = refusal_of(facts, node, mutated)
            if verdict is None:
                reinplaced.update(dict.fromkeys(storages, names))
                continue
            out.append(_refusal(node, op, names, mutated, verdict, None))
    return out


def reconcile(
    replayed: list[Refusal], graph_after: torch.fx.Graph, inductor_log: Mapping[str, str] | None = None
) -> list[Refusal]:
    """Keep the replayed refusals Inductor really cloned (``graph_after``: the same graph after the pass);
    a clone the replay did not predict gets cause ``other`` with Inductor's own log line, never "unknown"."""
    log = dict(inductor_log or {})
    by_key = {(r.node, r.args): r for r in replayed}
    out: list[Refusal] = []
    nodes = {n.name: n for n in graph_after.nodes}
    for key in sorted(cloned_args(graph_after), key=lambda k: (list(nodes).index(k[0]), k[1])):
        r = by_key.get(key)
        if r is not None:
            out.append(dataclasses.replace(r, inductor_log=log.get(r.node)))
            continue
        node = nodes[key[0]]
        is_hop = node.target in (_AF_V1, _AF_V2)
        mutated = next(m for n, m, _ in _candidates(node) if n == key[1])
        verdict: tuple[Cause, str, list[torch.fx.Node]] = (
            Cause.OTHER,
            "Inductor cloned it, though none of the replayed reinplace rules refuses it",
            [],
        )
        out.append(
            _refusal(
                node, op_label(node.args[0] if is_hop else node.target), key[1], mutated, verdict, log.get(node.name)
            )
        )
    return out


def _refusal(
    node: torch.fx.Node,
    op: str,
    names: tuple[str, ...],
    mutated: Any,
    verdict: tuple[Cause, str, list[torch.fx.Node]],
    log_line: str | None,
) -> Refusal:
    cause, detail, evidence = verdict
    base = mutated if isinstance(mutated, torch.fx.Node) else mutated[0]
    root = _root(base)
    other_args: tuple[str, ...] = ()
    other_base = None
    readers: tuple[Reader, ...] = ()
    if cause == Cause.SHARED_STORAGE and evidence:
        other_base = evidence[0].name
        other_args = _arg_names_of(node, evidence[0])
    elif cause in (Cause.READ_AFTER_WRITE, Cause.OUTPUT_ALIAS):
        readers = tuple(Reader(e.name, _reader_op(e), user_line(e), wrapper_line(e)) for e in evidence)
    if cause == Cause.OTHER and log_line:
        detail = f"{detail}; Inductor: {log_line}"
    return Refusal(
        cause=cause,
        node=node.name,
        op=op,
        args=names,
        base=base.name,
        placeholder=root.name if root.op in _PLACEHOLDERS else None,
        detail=detail,
        user_line=user_line(node),
        wrapper_line=wrapper_line(node),
        other_args=other_args,
        other_base=other_base,
        readers=readers,
        inductor_log=log_line,
    )


def _arg_names_of(node: torch.fx.Node, tensor: torch.fx.Node) -> tuple[str, ...]:
    for names, mutated, _ in _candidates(node):
        if mutated is tensor or (isinstance(mutated, (list, tuple)) and tensor in mutated):
            return names
    return (tensor.name,)


def _reader_op(node: torch.fx.Node) -> str:
    if node.op == "output":
        return "output"
    if node.target in (_AF_V1, _AF_V2):
        return op_label(node.args[0])
    return op_label(node.target)


__all__ = ["GraphFacts", "Reader", "Refusal", "cloned_args", "explain_refusals", "op_label", "reconcile", "refusal_of"]
