"""The replay over a graph: every mutated argument Inductor's reinplace pass must clone, and why.

Apart from the rules (:mod:`.rules`) because this is the walk: the candidates of each
``auto_functionalized`` / ``auto_functionalized_v2`` node or functional ATen write in Inductor's
order, the shared-storage rule across one call's arguments, what a graph after the pass says was
cloned, and the reconciliation of the two into :class:`Refusal` records.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, cast

import torch
import torch.fx
from torch._higher_order_ops.auto_functionalize import get_mutable_args
from torch._inductor.fx_passes import reinplace as inductor_reinplace

from compile_checks.check.graph.sites import is_view_scatter, scattered_source
from compile_checks.explain.refusals.records import Reader, Refusal, op_label
from compile_checks.explain.refusals.rules import (
    AF_V1,
    AF_V2,
    PLACEHOLDERS,
    GraphFacts,
    node_storages,
    refusal_of,
    view_base,
)
from compile_checks.explain.user_source import user_line, wrapper_line
from compile_checks.vocab import Cause, WriteKind


def _candidates(node: torch.fx.Node) -> list[tuple[tuple[str, ...], Any, Any]]:
    """(argument names, mutated tensor(s), the key Inductor's clone list uses) in Inductor's order."""
    if node.target is AF_V2:
        bases = node.kwargs["_all_bases"]
        names: dict[int, list[str]] = defaultdict(list)
        for k, v in node.kwargs.items():
            m = re.fullmatch(r"_(.+)_base_index(?:_\d+)?", k)
            if m and isinstance(v, int):
                names[v].append(m.group(1))
        return [(tuple(names.get(i, [f"base{i}"])), b, i) for i, b in enumerate(bases)]  # type: ignore[arg-type]
    if node.target is AF_V1:
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
        if node.target in (AF_V1, AF_V2):
            decided = set(node.meta.get("only_clone_these_tensors") or [])
            out |= {(node.name, names) for names, _, key in _candidates(node) if key in decided}
        elif node.target in inductor_reinplace.inplaceable_ops:
            out |= {(node.name, names) for names, _, _ in _candidates(node)}
        elif (
            _written_back_view_scatter(node)
            or _scatter_clone_of_input(node) is not None
            or chained_view_scatter(node) is not None
        ):
            # left functional (a re-inplaced one is a mutating scatter by then), or decomposed into a clone of
            # the input written through a view (a scatter through ``diagonal`` / ``as_strided``)
            out.add((node.name, ("self",)))
    return out


def explain_refusals(graph: torch.fx.Graph) -> list[Refusal]:
    """Replay the reinplace pass on ``graph`` as the pass receives it (before it runs): one
    :class:`Refusal` per mutated argument it must clone, in Inductor's order."""
    facts = GraphFacts.of(graph)
    out: list[Refusal] = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if _written_back_view_scatter(node):
            why = _scatter_refusal(facts, node)
            out.append(_refusal(node, op_label(node.target), ("self",), node.args[0], why, None))
            continue
        later = chained_view_scatter(node)
        if later is not None:
            why = (Cause.CHAINED_WRITES, chained_detail(node, later), [later])
            out.append(_refusal(node, op_label(node.target), ("self",), node.args[0], why, None))
            continue
        is_hop = node.target in (AF_V1, AF_V2)
        if not is_hop and node.target not in inductor_reinplace.inplaceable_ops:
            continue
        op = op_label(node.args[0] if is_hop else node.target)
        reinplaced: dict[Any, tuple[str, ...]] = {}  # storage -> args already written in place
        for names, mutated, _ in _candidates(node):
            if not isinstance(mutated, (torch.fx.Node, list, tuple)):
                continue
            storages = node_storages(mutated)
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
        r = by_key.get(key) or _same_scatter(replayed, nodes[key[0]]) or _scatter_of_clone(replayed, nodes[key[0]])
        if r is not None:
            out.append(dataclasses.replace(r, node=key[0], inductor_log=log.get(key[0])))
            continue
        node = nodes[key[0]]
        is_hop = node.target in (AF_V1, AF_V2)
        mutated = (
            node.args[0]
            if is_view_scatter(node) or _scatter_clone_of_input(node) is not None
            else next(m for n, m, _ in _candidates(node) if n == key[1])
        )
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


def _written_back_view_scatter(node: torch.fx.Node) -> bool:
    """A view scatter (``cache[:, a:b] = x``) directly on a graph input that a ``copy_`` writes back.

    Inductor canonicalizes it into ``_generalized_scatter`` (in ``inplaceable_ops``, checked by
    ``should_reinplace_scatter`` then ``can_inplace``) and decomposes what it leaves functional back
    into a view scatter of a new name, so the replay keys it by its input (:func:`_same_scatter`).
    """
    if not is_view_scatter(node):
        return False
    base = node.args[0]
    return base.op in PLACEHOLDERS and any(  # type: ignore[union-attr]
        u.target is torch.ops.aten.copy_.default and u.args[0] is base and u.args[1] is node for u in node.users
    )


def chained_view_scatter(node: torch.fx.Node) -> torch.fx.Node | None:
    """The next write of a view scatter on a graph input that is *not* copied back into it: a later view scatter
    of its result (``kv[1, :, :n] = v`` after ``kv[0, :, :n] = k``) whose chain reaches the input's ``copy_``,
    where some write of the chain goes into part of a view (a scatter of a scatter).

    Inductor's ``should_reinplace_scatter`` reinplaces a view scatter only when its input and result are realized
    anyway or its result is copied back into a graph input; the earlier write of such a chain is neither, so it
    stays functional, and the later write reads it: a buffer the size of the whole input, every call.
    """
    if not is_view_scatter(node) or not isinstance(node.args[0], torch.fx.Node):
        return None
    base = node.args[0]
    if base.op not in PLACEHOLDERS or _written_back_view_scatter(node):
        return None
    cur, nxt, nested = node, None, _writes_inside_a_view(node)
    for _ in range(64):
        step = next((u for u in cur.users if is_view_scatter(u) and u.args[0] is cur), None)
        if step is None:
            break
        nxt = nxt or step
        nested = nested or _writes_inside_a_view(step)
        cur = step
    written_back = any(u.target is torch.ops.aten.copy_.default and u.args[:2] == (base, cur) for u in cur.users)
    # a chain of whole-view writes of values of their own (``kv[0] = k; kv[1] = v``, v1's scatter-back of
    # its clones) is lowered as one pass over the input, no buffer: only a write into part of a view
    # (``kv[0, :, :n] = k``, a scatter of a scatter) makes Inductor keep the earlier result as a copy
    return nxt if nxt is not None and written_back and nested else None


def _writes_inside_a_view(scatter: torch.fx.Node) -> bool:
    """A view scatter whose source is itself a view scatter: a write into part of a view of its base."""
    src = scatter.args[1]
    return isinstance(src, torch.fx.Node) and is_view_scatter(src)


def chained_detail(node: torch.fx.Node, later: torch.fx.Node) -> str:
    """The chained-writes rule in words, with the elements the earlier write moves (0 for a ``[:0]`` write)."""
    base = cast(torch.fx.Node, node.args[0])
    src = scattered_source(node)
    val = src.meta.get("val") if src is not None else None
    numel = val.numel() if isinstance(val, torch.Tensor) else None
    empty = (
        "; this write moves no element (a zero-length slice such as `[:0]`), yet costs the whole copy"
        if isinstance(numel, int) and numel == 0
        else ""
    )
    return (
        f"`{node.name}` writes graph input `{base.name}` through a view, and `{later.name}` writes its result "
        f"again before the one `copy_` back into `{base.name}`: Inductor reinplaces a view write only when its "
        "result is what is copied back (`should_reinplace_scatter`), so it keeps this earlier write functional, a "
        f"copy of the whole input that the later write reads{empty}"
    )


def _scatter_refusal(facts: GraphFacts, node: torch.fx.Node) -> tuple[Cause, str, list[torch.fx.Node]]:
    """Why a written-back view scatter on an input stays functional: Inductor's ``can_inplace`` refusal
    (``should_reinplace_scatter`` holds: the result is copied back into the input itself)."""
    verdict = refusal_of(facts, node, node.args[0])
    if verdict is not None:
        return verdict
    return (
        Cause.OTHER,
        "Inductor kept this view scatter functional although no reinplace rule refuses it",
        [],
    )


def _same_scatter(replayed: list[Refusal], after: torch.fx.Node) -> Refusal | None:
    """The replayed refusal of the view scatter the pass re-created as ``after`` (same op, same input)."""
    if not is_view_scatter(after) or not isinstance(after.args[0], torch.fx.Node):
        return None
    base = after.args[0].name
    return next((r for r in replayed if r.op == op_label(after.target) and r.base == base), None)


def _scatter_clone_of_input(node: torch.fx.Node) -> torch.fx.Node | None:
    """The graph input under ``aten.clone(input)`` that Inductor's mutating decomposition of a view scatter
    it left functional made (``_decompose_scatter_mutating``: the packet ``aten.clone`` as target, a traced
    clone is ``clone.default``), written back by ``copy_(input, clone)``; None for any other node."""
    if node.op != "call_function" or node.target is not torch.ops.aten.clone or not node.args:
        return None
    base = node.args[0]
    if not isinstance(base, torch.fx.Node) or base.op not in PLACEHOLDERS:
        return None
    written_back = any(u.target is torch.ops.aten.copy_.default and u.args[:2] == (base, node) for u in node.users)
    return base if written_back else None


def _scatter_of_clone(replayed: list[Refusal], after: torch.fx.Node) -> Refusal | None:
    """The replayed refusal of the view scatter on the input that the pass decomposed into clone ``after``."""
    base = _scatter_clone_of_input(after)
    if base is None:
        return None
    return next((r for r in replayed if r.base == base.name and r.args == ("self",) and "scatter" in r.op), None)


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
    root = view_base(base)
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
        placeholder=root.name if root.op in PLACEHOLDERS else None,
        detail=detail,
        user_line=user_line(node),
        wrapper_line=wrapper_line(node),
        other_args=other_args,
        other_base=other_base,
        readers=readers,
        inductor_log=log_line,
        write_kind=WriteKind.OPAQUE_OP if node.target in (AF_V1, AF_V2) else WriteKind.ATEN,
    )


def _arg_names_of(node: torch.fx.Node, tensor: torch.fx.Node) -> tuple[str, ...]:
    for names, mutated, _ in _candidates(node):
        if mutated is tensor or (isinstance(mutated, (list, tuple)) and tensor in mutated):
            return names
    return (tensor.name,)


def _reader_op(node: torch.fx.Node) -> str:
    if node.op == "output":
        return "output"
    if node.target in (AF_V1, AF_V2):
        return op_label(node.args[0])
    return op_label(node.target)


__all__ = ["chained_detail", "chained_view_scatter", "cloned_args", "explain_refusals", "reconcile"]
