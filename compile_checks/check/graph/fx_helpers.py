"""Small pure helpers over post-grad FX graphs, shared by the graph analyses.

Views are followed by schema (an op whose first return aliases its first argument
without writing it); a mutated graph input is one AOT writes back with an
``aten.copy_`` epilogue.
"""

from __future__ import annotations

import functools
import operator
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


@functools.cache
def written_arguments(target: object) -> tuple[tuple[int, str], ...]:
    """(position, name) of each schema argument an op writes (``alias_info.is_write``); none without a schema.

    Cached per target: an overload's schema never changes, and the write watcher asks around every op
    an eager run dispatches (tens of thousands per case).
    """
    schema = getattr(target, "_schema", None)
    if schema is None:
        return ()
    return tuple(
        (i, a.name) for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write
    )


def mutated_arg_names(target: object) -> list[str]:
    """Names of the schema arguments an op writes (``alias_info.is_write``)."""
    return [name for _, name in written_arguments(target)]


def is_view_op(target: object) -> bool:
    """An op whose output aliases its first input without writing it (view / as_strided / ...)."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns or not schema.arguments:
        return False
    ret = schema.returns[0].alias_info
    first = schema.arguments[0].alias_info
    return ret is not None and not ret.is_write and first is not None and not first.is_write


def aliased_input(node: torch.fx.Node) -> torch.fx.Node | None:
    """The argument node ``node``'s value aliases, by schema; None when it aliases none.

    Covers every alias a later write can reach the caller's buffer through: a view
    (``Tensor(a) self -> Tensor(a)``), a mutating op's result (``index_put_(Tensor(a!) self)
    -> Tensor(a!)``: after reinplacing the write *is* the pool, and a walk that stopped there
    missed every copy made of it), and ``getitem`` of a multi-output view (``unbind``/``chunk``
    return ``Tensor(a)[]``).
    """
    if node.op != "call_function":
        return None
    if node.target is operator.getitem:
        src = node.args[0] if node.args else None
        if isinstance(src, torch.fx.Node) and _returns_alias_list(src.target) and src.args:
            # ``Tensor(a -> *) self -> Tensor(a)[]``: every element aliases ``self``
            up = src.args[0]
            return up if isinstance(up, torch.fx.Node) else None
        return None
    return _alias_arg(node, node.target)


def _returns_alias_list(target: object) -> bool:
    """A list-returning view (``unbind``, ``chunk``, ``split``): its first argument is an alias source."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns or not schema.arguments:
        return False
    first = schema.arguments[0].alias_info
    return (
        isinstance(schema.returns[0].type, torch.ListType)
        and schema.returns[0].alias_info is not None
        and first is not None
        and not first.is_write
    )


def _alias_arg(node: torch.fx.Node, target: object) -> torch.fx.Node | None:
    """The argument whose alias set the op's first return shares (``Tensor(a)`` / ``Tensor(a!)``)."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return None
    ret = schema.returns[0].alias_info
    if ret is None:
        return None
    sets = set(ret.before_set)
    for i, a in enumerate(schema.arguments):
        info = a.alias_info
        if info is None or not sets & set(info.before_set):
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
        return value if isinstance(value, torch.fx.Node) else None
    return None


def view_chain_root(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]]:
    """Follow every alias (views, mutating ops' results, multi-output views) back to the first
    node that owns its memory; returns (root, chain root-first)."""
    chain: list[torch.fx.Node] = []
    cur = node
    seen: set[torch.fx.Node] = set()
    while cur not in seen:
        seen.add(cur)
        up = aliased_input(cur)
        if up is None:
            break
        chain.append(cur)
        cur = up
    chain.reverse()
    return cur, chain


def is_clone(node: torch.fx.Node) -> bool:
    """An ``aten.clone`` call, by overload (``clone.default``) or by packet: Inductor's mutating
    decomposition of a view scatter (``_decompose_scatter_mutating``, every scatter through a
    ``diagonal`` or ``as_strided`` view) inserts ``aten.clone(input)`` with the packet as target."""
    if node.op != "call_function":
        return False
    return node.target is torch.ops.aten.clone or getattr(node.target, "overloadpacket", None) is torch.ops.aten.clone


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
