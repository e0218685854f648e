"""Pure analysis of the final post-grad graph: pool-sized copies of mutated graph inputs.

Two kinds of copy survive into what Inductor lowers (both are whole-buffer copies that run
every time the region runs, plus a copy back into the caller's tensor):

* ``functionalization_clone`` (:func:`find_clone_sites`): after ``decompose_auto_functionalized``
  a mutated argument the reinplace pass could not re-inplace is an ``aten.clone`` of (an
  ``as_strided`` view of) a graph input, passed (possibly through views) to the mutating op,
  and the clone's new value is what the ``copy_`` epilogue writes back into the input.
* ``aten_write_copy`` (:mod:`compile_checks.check.graph.aten_writes`): a plain ATen in-place write
  (``k[slots] = x``) that functionalization made functional (``index_put``) and reinplacing
  left so: Inductor lowers it as copy-the-whole-input, scatter, copy back. A view scatter through a
  ``diagonal`` or ``as_strided`` view (``k.diagonal().fill_(1)``) left functional is decomposed by the
  pass itself into ``aten.clone(k)``, a write into the clone's view and the ``copy_`` back: found by
  :func:`find_clone_sites` like a functionalization clone, reported with this kind.

The reinplace decision itself (``auto_functionalized*`` meta) is read by
:mod:`compile_checks.check.graph.functionalized`. Nothing here compiles or runs anything, so
hand-built graphs can be analysed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch
import torch.fx

from compile_checks.check.graph.aten_writes import find_aten_write_copies
from compile_checks.check.graph.functionalized import (
    AUTO_FUNCTIONALIZED_TARGETS,
)
from compile_checks.check.graph.fx_helpers import (
    bound_args,
    flatten_nodes,
    is_clone,
    mutated_arg_names,
    op_name,
    placeholder_indices,
    view_chain_root,
    write_backs,
)
from compile_checks.check.graph.geometry import TensorGeometry, geometry_of
from compile_checks.check.graph.rebuilt import find_rebuilt_inputs
from compile_checks.check.graph.sites import CloneSite, is_view_scatter
from compile_checks.vocab import CopyKind


def clone_source_geometry(clone_input: torch.fx.Node, placeholder: torch.fx.Node) -> tuple[TensorGeometry | None, bool]:
    """Geometry of the cloned buffer in the input's storage, and whether it spans more than the input.

    The decomposition clones ``as_strided(base, [numel], [1], offset)`` (v2 and the
    aliased-input case of v1) or the input itself.
    """
    if clone_input is placeholder:
        return geometry_of(placeholder.meta.get("val")), False
    geo = geometry_of(clone_input.meta.get("val"))
    if geo is None:
        return None, False
    base = geometry_of(placeholder.meta.get("val"))
    whole = False
    if base is not None and clone_input.target is torch.ops.aten.as_strided.default:
        lo, hi = geo.element_span()
        blo, bhi = base.element_span()
        whole = lo <= blo and hi >= bhi and geo.numel > base.numel
    return geo, whole


def written_back_values(src: torch.fx.Node) -> list[tuple[torch.fx.Node, torch.fx.Node]]:
    """(buffer, the value node carrying it) for every buffer a ``copy_(dst, src)`` writes into ``dst``.

    ``src`` itself (under its views), and through a chain of view scatters
    (``select_scatter(select_scatter(x, a, 0, 0), b, 0, 1)``) each scattered ``src``
    (``a``, ``b``, under their views) and the chain's bottom ``self`` (``x``).
    """
    out: list[tuple[torch.fx.Node, torch.fx.Node]] = []
    cur, _ = view_chain_root(src)
    carrier = src
    while is_view_scatter(cur):
        scattered = cur.args[1]
        out.append((view_chain_root(scattered)[0], scattered))  # type: ignore[arg-type]
        carrier = cur.args[0]  # type: ignore[assignment]
        cur, _ = view_chain_root(carrier)
    out.append((cur, carrier))
    return out


def written_back_from(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[TensorGeometry]]:
    """Buffer node -> geometries written back from it into graph inputs by ``copy_`` epilogues.

    A buffer copied straight back (``copy_(k, clone)``) writes the ``copy_``'s destination; one
    scattered into a view of the input first (v1 ``copy_(kv, select_scatter(kv, clone, 0, 0))``)
    writes the scattered view, whose size is the size of the scattered value.
    """
    out: dict[torch.fx.Node, list[TensorGeometry]] = {}
    for copy_node, _, src in write_backs(graph):
        dst_geo = geometry_of(copy_node.args[0].meta.get("val"))  # type: ignore[union-attr]
        for buffer, carrier in written_back_values(src):
            geo = dst_geo if carrier is src else geometry_of(carrier.meta.get("val"))
            if geo is not None:
                out.setdefault(buffer, []).append(geo)
    return out


def find_clone_sites(
    graph: torch.fx.Graph,
    preexisting: Iterable[torch.fx.Node] | None = None,
) -> list[CloneSite]:
    """Functionalization clones of graph inputs that feed a mutated argument of a mutating op.

    Only a clone whose written value the ``copy_`` epilogue writes back into an input counts:
    that is the clone standing in for the input. A clone whose value is never written back is
    a copy the user asked for (``kc = k.clone(); op(kc)``), even when the decomposition
    re-created it under a new name after the reinplace pass removed the user's own node.

    Args:
        graph: the final post-grad graph (after ``decompose_auto_functionalized``).
        preexisting: nodes that already existed before reinplacing; a clone among
            them is the user's own (``x.clone()``), not a functionalization copy.
    """
    old = set(preexisting) if preexisting is not None else set()
    inputs = placeholder_indices(graph)
    written_back = written_back_from(graph)
    # one site per clone buffer (the generated code allocates one buffer per clone node): two
    # arguments sharing a v2 base clone, or two ops writing through one clone, are one copy
    by_clone: dict[torch.fx.Node, CloneSite] = {}
    for node in graph.nodes:
        if node.op != "call_function" or node.target in AUTO_FUNCTIONALIZED_TARGETS:
            continue
        written = mutated_arg_names(node.target)
        if not written:
            continue
        bound = bound_args(node)
        for arg in written:
            for passed in flatten_nodes(bound.get(arg)):
                clone_node, _ = view_chain_root(passed)
                if not is_clone(clone_node):
                    continue
                if clone_node in old or not clone_node.args or not isinstance(clone_node.args[0], torch.fx.Node):
                    continue
                clone_input = clone_node.args[0]
                root, _ = view_chain_root(clone_input)
                if root.op != "placeholder":
                    continue  # a clone of an intermediate: not a copy of a caller's buffer
                if clone_node not in written_back:
                    continue  # the clone's value never goes back into an input: the user's own copy
                clone_geo = geometry_of(clone_node.meta.get("val"))
                if clone_geo is None:
                    continue
                prior = by_clone.get(clone_node)
                if prior is not None:
                    also = (op_name(node.target), arg)
                    if also != (prior.op, prior.arg) and also not in prior.also_feeds:
                        by_clone[clone_node] = dataclasses.replace(prior, also_feeds=(*prior.also_feeds, also))
                    continue
                source, whole = clone_source_geometry(clone_input, root)
                by_clone[clone_node] = CloneSite(
                    op=op_name(node.target),
                    arg=arg,
                    clone_node=clone_node.name,
                    placeholder=root.name,
                    placeholder_index=inputs[root],
                    clone=clone_geo,
                    view=geometry_of(passed.meta.get("val")),
                    clone_source_offset=source.storage_offset if source is not None else None,
                    clones_whole_input=whole,
                    clone_is_input=clone_input is root,
                    written=tuple(written_back[clone_node]),
                    clone_source=source,
                    # Inductor's own clone for a view scatter it decomposed into mutations (through a
                    # ``diagonal`` / ``as_strided`` view): the functional form of a plain ATen write
                    kind=CopyKind.ATEN_WRITE_COPY
                    if clone_node.target is torch.ops.aten.clone
                    else CopyKind.FUNCTIONALIZATION_CLONE,
                )
    return list(by_clone.values())


def misplaced_write_backs(graph: torch.fx.Graph) -> list[str]:
    """``copy_(dst, view_of(clone(as_strided(input, ..., off))))`` epilogues whose clone was taken from
    other bytes of the input's storage than the ones it is written back into.

    In Inductor's code an explicit offset into a graph input and the input's own views are both
    taken relative to the input, so the write-back reads what it writes only when
    ``off + (src offset in the clone) == dst offset``. When the decomposition cloned from a stale
    geometry (seen: an eviction ``index_put_`` re-inplaced on a pool at a non-zero storage offset,
    ``kv[1]``, whose result kept the functional op's offset-0 fake value), the compiled code
    copies another tensor's bytes (K's) into the pool (V): a miscompile, compiled != eager.
    """
    out: list[str] = []
    for copy_node, placeholder, src in write_backs(graph):
        clone_node, _ = view_chain_root(src)
        if not is_clone(clone_node) or not clone_node.args:
            continue
        clone_input = clone_node.args[0]
        if not isinstance(clone_input, torch.fx.Node) or view_chain_root(clone_input)[0] is not placeholder:
            continue
        dst_geo = geometry_of(copy_node.args[0].meta.get("val"))  # type: ignore[union-attr]
        src_geo = geometry_of(src.meta.get("val"))
        if dst_geo is None or src_geo is None or dst_geo.is_symbolic or src_geo.is_symbolic:
            continue
        if clone_input is placeholder:
            ph_geo = geometry_of(placeholder.meta.get("val"))
            start = ph_geo.storage_offset if ph_geo is not None and not ph_geo.is_symbolic else None
        elif clone_input.target is torch.ops.aten.as_strided.default and len(clone_input.args) >= 4:
            start = clone_input.args[3] if isinstance(clone_input.args[3], int) else None
        else:
            start = None
        if start is None:
            continue
        if start + src_geo.storage_offset != dst_geo.storage_offset or src_geo.shape != dst_geo.shape:
            out.append(
                f"{copy_node.name}: the value written back into {placeholder.name} (storage offset "
                f"{dst_geo.storage_offset}) comes from clone {clone_node.name} taken at storage offset "
                f"{start + src_geo.storage_offset}: the compiled code writes other bytes of that storage into "
                "the pool (a stale geometry in Inductor's decomposition; compiled != eager)"
            )
    return out


def find_copy_sites(graph: torch.fx.Graph, preexisting: Iterable[torch.fx.Node] | None = None) -> list[CloneSite]:
    """Every whole-buffer copy of a mutated input: functionalization clones, ATen write copies, then inputs
    rebuilt in a fresh buffer (:mod:`compile_checks.check.graph.rebuilt`, a write through ``unfold``)."""
    clones = find_clone_sites(graph, preexisting)
    return clones + find_aten_write_copies(graph, {s.clone_node for s in clones}) + find_rebuilt_inputs(graph)


__all__ = [
    "clone_source_geometry",
    "find_clone_sites",
    "find_copy_sites",
    "misplaced_write_backs",
    "written_back_from",
    "written_back_values",
]
