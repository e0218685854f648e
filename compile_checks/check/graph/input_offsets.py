"""Run a post-grad graph eagerly with the aliasing semantics of the code Inductor generates for it.

An explicit ``as_strided(x, size, stride, offset)`` on (an alias of) a graph input means two
different things: eagerly, ``offset`` is absolute in the input's storage; in Inductor's
lowering it is made relative to the input (``offset - graph_input_storage_offsets[input]``,
since a runtime input pointer already includes the input's own ``storage_offset()``). The
two agree only on a call whose input sits where the compile-time input sat. A region compiled
on ``big[0]`` and reused for ``big[1..3]`` (vLLM's cross-layer KV layout) then reads and
writes layer 0's bytes when its post-grad graph runs eagerly: analysis-only corrupted the
pools. :func:`rebase_input_offsets` rewrites every such offset to what the compiled code uses.
"""

from __future__ import annotations

import torch
import torch.fx

from compile_checks.check.graph.fx_helpers import view_chain_root

_aten = torch.ops.aten
# ops whose argument 3 is a storage offset taken in the storage of argument 0
_OFFSET_OPS: frozenset[object] = frozenset(
    getattr(_aten, name).default for name in ("as_strided", "as_strided_", "as_strided_copy") if hasattr(_aten, name)
)


def _rebased(offset: int, tensor: torch.Tensor, compiled_offset: int) -> int:
    """The storage offset Inductor's code uses for this call (see the module docstring)."""
    return offset + int(tensor.storage_offset()) - compiled_offset


def _explicit_offset(node: torch.fx.Node) -> bool:
    """An ``as_strided`` family call with an explicit offset (without one, the input's own is kept by both)."""
    if node.op != "call_function" or node.target not in _OFFSET_OPS:
        return False
    return len(node.args) >= 4 or "storage_offset" in node.kwargs


def rebase_input_offsets(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, int]:
    """A copy of ``gm`` whose explicit offsets into graph inputs follow Inductor's semantics.

    Returns (the new module, how many offsets were rebased); ``gm`` itself, not copied nor
    recompiled, when no node takes an explicit offset. An input whose compile-time offset is
    symbolic needs nothing: its symbol is bound to the runtime offset already.
    """
    if not any(_explicit_offset(n) for n in gm.graph.nodes):
        return gm, 0
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    rebased = 0
    for node in list(graph.nodes):
        if not _explicit_offset(node):
            continue
        root, _ = view_chain_root(node.args[0])  # type: ignore[arg-type]
        val = root.meta.get("val") if root.op == "placeholder" else None
        if not isinstance(val, torch.Tensor):
            continue
        compiled = val.storage_offset()
        if not isinstance(compiled, int):
            continue
        offset = node.args[3] if len(node.args) >= 4 else node.kwargs["storage_offset"]
        with graph.inserting_before(node):
            new = graph.call_function(_rebased, (offset, root, compiled))
        if len(node.args) >= 4:
            node.args = (*node.args[:3], new, *node.args[4:])
        else:
            node.kwargs = {**node.kwargs, "storage_offset": new}
        rebased += 1
    return torch.fx.GraphModule(gm, graph), rebased


__all__ = ["rebase_input_offsets"]
