"""An input rebuilt whole in a fresh buffer and written back: the inverse of a view with no scatter op.

Functionalization writes through most views with a ``*_scatter`` op (:mod:`.copies`, :mod:`.aten_writes`).
``unfold`` has none: ``k.unfold(0, 2, 2)[3].fill_(1)`` becomes ``unfold_backward``, which Inductor
decomposes into a zero-filled buffer the size of ``k`` (``full``), an ``index_put_`` that accumulates
every element of the updated unfolded view into it, and the ``copy_`` back into ``k``. The generated
code allocates that buffer and copies the whole input through it on every call, whether or not the
old value is read later: a copy no reinplacing can avoid (write through ``k.view(...)`` instead).

Found as: a ``copy_`` epilogue whose value is (a view of) a freshly allocated buffer that some op writes
in place with values computed from that same input. Pure graph analysis, no compile.
"""

from __future__ import annotations

import torch
import torch.fx

from compile_checks.check.graph.fx_helpers import (
    bound_args,
    flatten_nodes,
    op_name,
    placeholder_indices,
    view_chain_root,
    write_backs,
    written_arguments,
)
from compile_checks.check.graph.geometry import geometry_of
from compile_checks.check.graph.sites import CloneSite
from compile_checks.vocab import CopyKind

_aten = torch.ops.aten
# ops that allocate a fresh buffer (no input's memory)
_FACTORIES: frozenset[object] = frozenset(
    getattr(_aten, name)
    for name in ("full", "zeros", "empty", "empty_strided", "new_zeros", "new_empty", "full_like", "zeros_like")
    if hasattr(_aten, name)
)


def _is_factory(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "overloadpacket", None) in _FACTORIES


def _reads(node: torch.fx.Node, placeholder: torch.fx.Node, skip: torch.fx.Node) -> bool:
    """Whether ``node``'s arguments are computed from ``placeholder`` (not counting the buffer ``skip``)."""
    stack, seen = [a for a in node.all_input_nodes if a is not skip], set()
    while stack:
        cur = stack.pop()
        if cur is placeholder:
            return True
        if cur in seen or cur is skip:
            continue
        seen.add(cur)
        stack.extend(cur.all_input_nodes)
    return False


def _writer_from(buffer: torch.fx.Node, placeholder: torch.fx.Node) -> torch.fx.Node | None:
    """An op that writes ``buffer`` in place with values computed from ``placeholder``."""
    for node in buffer.graph.nodes:
        if node.op != "call_function" or getattr(node.target, "_schema", None) is None:
            continue
        written = [a for _, a in written_arguments(node.target)]
        if not written:
            continue
        bound = bound_args(node)
        writes_buffer = any(view_chain_root(n)[0] is buffer for arg in written for n in flatten_nodes(bound.get(arg)))
        if writes_buffer and _reads(node, placeholder, buffer):
            return node
    return None


def find_rebuilt_inputs(graph: torch.fx.Graph) -> list[CloneSite]:
    """One site per fresh input-sized buffer written back into a graph input it was computed from."""
    inputs = placeholder_indices(graph)
    out: list[CloneSite] = []
    for copy_node, placeholder, src in write_backs(graph):
        buffer, _ = view_chain_root(src)
        if not _is_factory(buffer) or any(s.clone_node == buffer.name for s in out):
            continue
        geo, dst_geo = geometry_of(buffer.meta.get("val")), geometry_of(copy_node.args[0].meta.get("val"))  # type: ignore[union-attr]
        ph_geo = geometry_of(placeholder.meta.get("val"))
        if geo is None or dst_geo is None or ph_geo is None or geo.numel < ph_geo.numel:
            continue  # a buffer smaller than the input: a part of it, not the input rebuilt
        writer = _writer_from(buffer, placeholder)
        if writer is None:
            continue  # filled with values of its own (a reset, ``k.zero_()``-like): no copy of the input
        out.append(
            CloneSite(
                op=op_name(writer.target),
                arg="self",
                clone_node=buffer.name,
                placeholder=placeholder.name,
                placeholder_index=inputs[placeholder],
                clone=geo,
                view=dst_geo,
                clone_source_offset=None,
                clones_whole_input=False,
                kind=CopyKind.ATEN_WRITE_COPY,
                written=(dst_geo,),
                view_in_input_storage=True,
            )
        )
    return out


__all__ = ["find_rebuilt_inputs"]
