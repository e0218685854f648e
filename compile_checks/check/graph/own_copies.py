"""Pool-sized copies the program asks for itself: notes with their bytes per call, never failures.

Two shapes reach Inductor's code as a buffer the size of a graph input that is no stand-in for a
write of it (so not a copy the reinplace pass could have avoided):

* a clone of the input that the program writes in place and does not write back (``kc = k.clone();
  op(kc)`` with a custom op mutating ``kc``);
* an out-of-place write of the input whose result is *not* written back into it: ``kc = k.clone();
  kc.index_copy_(...)`` (functionalized into ``index_put(k, ...)``), or ``k.index_copy(...)`` whose
  result the program keeps (and, rebound to the pool, is the ``pool_replaced`` finding of
  :mod:`compile_checks.check.pool_identity`);
* a value written back into the input computed from the input by an op that moves elements (a roll
  of a sliding window, ``k.copy_(torch.roll(k, -n, 0))``: an ``index`` gather): Inductor computes it
  into a buffer before writing it back (a pointwise op, ``k.mul_(2)``, is fused into the write-back).

Pure graph analysis, as :mod:`.aten_writes`; the live check notes each once per graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from compile_checks.check.graph.aten_writes import is_functional_write
from compile_checks.check.graph.copies import written_back_values
from compile_checks.check.graph.fx_helpers import (
    bound_args,
    flatten_nodes,
    is_clone,
    op_name,
    view_chain_root,
    write_backs,
    written_arguments,
)
from compile_checks.check.graph.geometry import geometry_of
from compile_checks.check.graph.sites import is_view_scatter


def _nbytes(node: torch.fx.Node) -> int | None:
    geo = geometry_of(node.meta.get("val"))
    return None if geo is None or geo.is_symbolic else geo.nbytes


def _written_back_chains(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Every functional write (and view) on the way from a ``copy_`` epilogue's value down to its input."""
    out: set[torch.fx.Node] = set()
    for _copy, _placeholder, src in write_backs(graph):
        out.update(buffer for buffer, _ in written_back_values(src))  # v1's clone scattered back: a copy site
        cur, views = view_chain_root(src)
        out.update(views)
        while is_functional_write(cur):
            out.add(cur)
            cur, views = view_chain_root(cur.args[0])  # type: ignore[arg-type]
            out.update(views)
        out.add(cur)
    return out


def _moves_elements(node: torch.fx.Node) -> bool:
    """Not pointwise (a gather, a roll): each output element may come from another input element."""
    tags = getattr(node.target, "tags", ())
    return torch.Tag.pointwise not in tags and getattr(node.target, "_schema", None) is not None


def _written_in_place(buffer: torch.fx.Node) -> bool:
    """Some op writes ``buffer`` (or a view of it) in place: Inductor must give it memory of its own."""
    for node in buffer.graph.nodes:
        if node.op != "call_function":
            continue
        written = [a for _, a in written_arguments(node.target)]
        if not written:
            continue
        bound = bound_args(node) if getattr(node.target, "_schema", None) is not None else {}
        if any(view_chain_root(n)[0] is buffer for arg in written for n in flatten_nodes(bound.get(arg))):
            return True
    return False


@dataclass(frozen=True)
class OwnCopy:
    """One of them: the node, the graph input it copies, its bytes, how it is made and the note that says so."""

    node: str
    placeholder: str
    nbytes: int
    what: str
    note: str


def programs_own_copies(graph: torch.fx.Graph) -> list[str]:
    """Notes for the pool-sized buffers of graph inputs the program itself asks for (module docstring)."""
    return [r.note for r in own_copy_records(graph)]


def own_copy_records(graph: torch.fx.Graph) -> list[OwnCopy]:
    """The pool-sized buffers of graph inputs the program itself asks for, as records (module docstring)."""
    out: list[OwnCopy] = []
    written_back = _written_back_chains(graph)
    for node in graph.nodes:
        if not is_functional_write(node) or is_view_scatter(node) or node in written_back:
            continue
        root, _ = view_chain_root(node.args[0])  # type: ignore[arg-type]
        nbytes = _nbytes(node)
        if root.op != "placeholder" or nbytes is None:
            continue
        what = f"{op_name(node.target)} of the pool out of place, its result not written back into it"
        note = (
            f"{node.name}: {op_name(node.target)} of graph input {root.name} out of place, its result not written "
            f"back into it: a copy of {nbytes} bytes per call the program asks for (a .clone() of the pool written, "
            "an out-of-place update); rebound to a named pool, it is reported as pool_replaced"
        )
        out.append(OwnCopy(node.name, root.name, nbytes, what, note))
    for node in graph.nodes:
        if not is_clone(node) or node in written_back or not isinstance(node.args[0], torch.fx.Node):
            continue
        root, _ = view_chain_root(node.args[0])
        nbytes = _nbytes(node)
        if root.op != "placeholder" or nbytes is None or not _written_in_place(node):
            continue
        note = (
            f"{node.name}: a clone of graph input {root.name} that the program writes and does not write back: "
            f"a copy of {nbytes} bytes per call the program asks for (`.clone()` of the pool)"
        )
        what = "a clone of the pool the program writes and does not write back"
        out.append(OwnCopy(node.name, root.name, nbytes, what, note))
    for _copy, placeholder, src in write_backs(graph):
        value, _ = view_chain_root(src)
        while is_view_scatter(value):  # ``k[:, -1:] = x`` after the roll: the scatter's base is the rolled value
            value, _ = view_chain_root(value.args[0])  # type: ignore[arg-type]
        if value.op != "call_function" or is_functional_write(value) or is_clone(value) or not _moves_elements(value):
            continue  # the input itself, or a copy site of its own (aten_writes, copies): not this note
        reads = [a for a in value.all_input_nodes if view_chain_root(a)[0] is placeholder]
        nbytes = _nbytes(value)
        if not reads or nbytes is None or nbytes < (_nbytes(placeholder) or 0):
            continue
        note = (
            f"{value.name}: the value written back into {placeholder.name} is computed from it by "
            f"{op_name(value.target)} (a roll or shift of a window): Inductor computes it into a buffer first, "
            f"a copy of {nbytes} bytes per call the program asks for"
        )
        what = f"the pool computed from itself by {op_name(value.target)} (a roll or shift) before its write-back"
        out.append(OwnCopy(value.name, placeholder.name, nbytes, what, note))
    return out


__all__ = ["OwnCopy", "own_copy_records", "programs_own_copies"]
