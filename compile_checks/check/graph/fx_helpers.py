"""Small pure helpers over post-grad FX graphs, shared by the graph analyses.

Views are followed by schema (an op whose first return aliases its first argument
without writing it); a mutated graph input is one AOT writes back with an
``aten.copy_`` epilogue.
"""

from __future__ import annotations

import re

import torch
import torch.fx

_WRITE_BACK_TARGETS: tuple[object, ...] = (torch.ops.aten.copy_.default,)


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


def is_view_op(target: object) -> bool:
    """An op whose output aliases its first input without writing it (view / as_strided / ...)."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns or not schema.arguments:
        return False
    ret = schema.returns[0].alias_info
    first = schema.arguments[0].alias_info
    return ret is not None and not ret.is_write and first is not None and not first.is_write


def view_chain_root(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]]:
    """Follow view ops back to the first non-view node; returns (root, chain root-first)."""
    chain: list[torch.fx.Node] = []
    cur = node
    while cur.op == "call_function" and is_view_op(cur.target) and cur.args and isinstance(cur.args[0], torch.fx.Node):
        chain.append(cur)
        cur = cur.args[0]
    chain.reverse()
    return cur, chain


def bound_args(node: torch.fx.Node) -> dict[str, object]:
    """Schema argument name -> value (positional and keyword) of an OpOverload call."""
    schema = node.target._schema  # type: ignore[union-attr]
    bound: dict[str, object] = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args):
            bound[a.name] = node.args[i]
        elif a.name in node.kwargs:
            bound[a.name] = node.kwargs[a.name]
    return bound


def flatten_nodes(value: object) -> list[torch.fx.Node]:
    if isinstance(value, torch.fx.Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in flatten_nodes(v)]
    return []


def placeholder_indices(graph: torch.fx.Graph) -> dict[torch.fx.Node, int]:
    """Placeholder node -> its position among the graph's inputs."""
    return {n: i for i, n in enumerate(n for n in graph.nodes if n.op == "placeholder")}


def write_backs(graph: torch.fx.Graph) -> list[tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node]]:
    """Every ``copy_(dst, src)`` whose dst is (a view of) a graph input: (copy node, input, src)."""
    out: list[tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node]] = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in _WRITE_BACK_TARGETS or len(node.args) < 2:
            continue
        dst, src = node.args[0], node.args[1]
        if isinstance(dst, torch.fx.Node) and isinstance(src, torch.fx.Node):
            root, _ = view_chain_root(dst)
            if root.op == "placeholder":
                out.append((node, root, src))
    return out


def mutated_inputs(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Graph inputs the program mutates: AOT writes them back with an ``aten.copy_`` epilogue."""
    return {ph for _, ph, _ in write_backs(graph)}


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
