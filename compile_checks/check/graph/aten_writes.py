"""ATen writes the reinplace pass left functional: whole-buffer copies of a mutated input.

``k[slots] = x`` on a graph input is functionalized into ``k_new = index_put(k, [slots], x)``
plus a ``copy_(k, k_new)`` epilogue. Inductor's reinplace pass turns it back into
``index_put_(k, ...)`` unless the old ``k`` is still read after the write (a window gather
that ``reorder_for_locality`` sank below it, say). Left functional, Inductor lowers it as a
fresh pool-sized buffer: copy all of ``k`` in, scatter, copy all of it back. The same holds
for every functional form of an in-place write listed in :data:`FUNCTIONAL_WRITE_OPS`
(``copy_`` into a slice becomes ``slice_scatter``, ``x[i] = ...`` ``select_scatter``, ...).
An in-place collective on a pool (``dist.all_reduce(pool)``: ``_c10d_functional.all_reduce`` read
through ``wait_tensor``, :data:`COLLECTIVE_WRITE_OPS`) left out of place is the same copy.
"""

from __future__ import annotations

from collections.abc import Collection

import torch
import torch._inductor.config as inductor_config
import torch.fx

from compile_checks.check.graph.fx_helpers import (
    aliased_input,
    op_name,
    placeholder_indices,
    view_chain_root,
    write_backs,
)
from compile_checks.check.graph.geometry import TensorGeometry, geometry_of
from compile_checks.check.graph.sites import CloneSite, is_view_scatter
from compile_checks.vocab import CopyKind

_aten = torch.ops.aten
# functional ops whose output is ``self`` with some elements replaced: the functional
# form of an in-place write into ``self`` (schema argument 0 is always ``self``)
_WRITE_OP_NAMES: tuple[str, ...] = (
    "index_put",
    "_unsafe_index_put",
    "index_copy",
    "index_add",
    "index_fill",
    "index_reduce",
    "scatter",
    "scatter_add",
    "scatter_reduce",
    "slice_scatter",
    "select_scatter",
    "as_strided_scatter",
    "diagonal_scatter",
    "masked_scatter",
)
FUNCTIONAL_WRITE_OPS: frozenset[object] = frozenset(
    getattr(_aten, name) for name in _WRITE_OP_NAMES if hasattr(_aten, name)
)
_c10d = getattr(torch.ops, "_c10d_functional", None)
# out-of-place collectives whose result replaces every element of their input: Inductor lowers
# them as a clone of the input plus the in-place collective on the clone (torch/_inductor/comm_lowering.py);
# written back into a pool, that clone is a copy of the pool (re-inplaced, ``all_reduce_``, there is none)
COLLECTIVE_WRITE_OPS: frozenset[object] = frozenset(
    getattr(_c10d, name) for name in ("all_reduce",) if _c10d is not None and hasattr(_c10d, name)
)
_WAIT_TENSOR = getattr(_c10d, "wait_tensor", None)


def is_functional_write(node: torch.fx.Node) -> bool:
    """A call of one of :data:`FUNCTIONAL_WRITE_OPS` (any overload) whose ``self`` is a node."""
    if node.op != "call_function":
        return False
    packet = getattr(node.target, "overloadpacket", None)
    return (
        (packet in FUNCTIONAL_WRITE_OPS or packet in COLLECTIVE_WRITE_OPS)
        and bool(node.args)
        and isinstance(node.args[0], torch.fx.Node)
    )


def _through_wait(node: torch.fx.Node) -> torch.fx.Node:
    """A collective's result is read through ``wait_tensor(result)``: the value is the collective's."""
    while (
        _WAIT_TENSOR is not None
        and node.op == "call_function"
        and getattr(node.target, "overloadpacket", None) is _WAIT_TENSOR
        and isinstance(node.args[0], torch.fx.Node)
    ):
        node = node.args[0]
    return node


def _first_write_on_input(src: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, list[torch.fx.Node]] | None:
    """Walk a written-back value through chained functional writes to the input they copy.

    Returns (the write that reads the input, that input's placeholder, every write of the
    chain), or None when the value is no functional write of (a view of) a graph input.
    """
    cur = _through_wait(view_chain_root(src)[0])
    chain: list[torch.fx.Node] = []
    while is_functional_write(cur):
        chain.append(cur)
        cur = _through_wait(view_chain_root(cur.args[0])[0])  # type: ignore[arg-type]
    if not chain or cur.op != "placeholder":
        # refusal: a write into a clone or an intermediate copies no caller buffer by itself
        return None
    return chain[-1], cur, chain


def _scatters_back_clones(chain: list[torch.fx.Node], clones: Collection[str]) -> bool:
    """Every write of the chain scatters one of ``clones`` back into a view of the input.

    That is v1 ``auto_functionalized``'s write-back of a view it cloned
    (``copy_(kv, select_scatter(kv, clone_k, 0, 0))``): the copy is the clone, already a
    functionalization-clone site; Inductor lowers the scatter into the ``copy_`` and allocates
    no buffer for it, so reporting it too would count one copy twice. Not so when Inductor calls ATen's
    kernels (:func:`lowered_by_aten`): each scatter is then a pool-sized buffer of its own.
    """
    if lowered_by_aten():
        return False
    return all(is_view_scatter(w) and view_chain_root(w.args[1])[0].name in clones for w in chain)  # type: ignore[arg-type]


def lowered_by_aten() -> bool:
    """Inductor's ``fallback_by_default``: it calls ATen's own kernel for the ops it would lower, so a view
    scatter is an extern kernel's result (a pool-sized buffer of its own), never computed inside its
    write-back. Read from Inductor's config while it compiles (the post-grad passes run under it)."""
    return bool(getattr(inductor_config, "fallback_by_default", False))


def allocates_buffer(write: torch.fx.Node) -> bool:
    """Whether Inductor's code may give this functional write a buffer of its own.

    A view scatter (``slice_scatter``, ``select_scatter`` ...) lowers pointwise: when its only
    users are the ``copy_`` epilogue or the next functional write of the chain, straight or through a
    permutation (``k.t()[2] = x``), it is computed inside that loop (``k[a:b] = x`` becomes one
    read-modify-write pass over ``k``, no buffer). Read besides, or written back through a reshape or a
    dtype view (``k.view(NB, BS, H, D)[b][o] = x``, ``raw.view(torch.float32)[:, c] = x``), it may get a
    pool-sized buffer: Inductor's choice (:func:`buffer_choice_reason`). Every other functional write
    (``index_put``, ``scatter`` ...) clones its ``self`` into a buffer first, one per write; so does every
    view scatter Inductor hands to ATen's kernel (:func:`lowered_by_aten`: Inductor's choice, as it may still
    lower some).
    """
    if not is_view_scatter(write) or lowered_by_aten():
        return True
    return any(not _is_write_back_or_chain(user) for user in write.users) or _nested_with_a_later_read(write)


def _nested_with_a_later_read(write: torch.fx.Node) -> bool:
    """A view scatter of a view scatter (``k.select(0, i).narrow(0, a, n).fill_(1)``) whose input is still read
    after it: seen in Inductor's code to realize the scatter into a pool-sized buffer (a single-level
    ``slice_scatter`` read so stays one pass; a property test over view chains found the nested one)."""
    src = view_chain_root(write.args[1])[0]  # type: ignore[arg-type]
    if not is_functional_write(src):
        return False
    base = view_chain_root(write.args[0])[0]  # type: ignore[arg-type]
    while is_functional_write(base):
        base = view_chain_root(base.args[0])[0]  # type: ignore[arg-type]
    if base.op != "placeholder":
        return False
    order = {n: i for i, n in enumerate(write.graph.nodes)}
    return any(
        order[user] > order[write] and user.target is not _aten.copy_.default and not is_functional_write(user)
        for view in _views_of(base)
        for user in view.users
    )


def _views_of(node: torch.fx.Node) -> list[torch.fx.Node]:
    """``node`` and every view of it (through views of views)."""
    out, todo = [node], [node]
    while todo:
        for user in todo.pop().users:
            if user.op == "call_function" and aliased_input(user) is not None and user not in out:
                out.append(user)
                todo.append(user)
    return out


def buffer_choice_reason(write: torch.fx.Node) -> str:
    """Why a view scatter that :func:`allocates_buffer` may still get none: the reason an upper bound gives."""
    if lowered_by_aten():
        return "is handed to ATen's kernel (fallback_by_default), which returns a new buffer"
    if read_only_through_sub_views(write):
        return "is read only through sub-views besides its write-back"
    if any(_is_write_back_or_chain(u, permutes_only=False) for u in write.users if not _is_write_back_or_chain(u)):
        return "reaches its write-back through a reshape or dtype view"
    if _nested_with_a_later_read(write):
        return "scatters a nested view while the old input is still read after it"
    return "is read besides its write-back"


# views whose result is a sub-range of their input's elements (the window read of a scattered cache)
_SUB_VIEW_OPS: frozenset[object] = frozenset(
    getattr(_aten, name) for name in ("slice", "select", "narrow", "as_strided") if hasattr(_aten, name)
)


def read_only_through_sub_views(write: torch.fx.Node) -> bool:
    """Whether every reader of a view scatter besides its write-back takes fewer elements than it has.

    Seen in Inductor's code (Self-Forcing's ``cache[:, :end]`` read of the scattered cache): a sub-view
    reader leaves the scatter lazy and it is computed inside its readers, no buffer; ``end`` equal to
    the whole length (a whole-tensor reader) gives it a buffer. Which one Inductor picks is its lowering's
    choice, not ours to predict: such a site is kept (an upper bound) and marked
    ``buffer_is_inductors_choice``. Symbolic sizes are never called smaller.
    """
    whole = _numel(write)
    if whole is None:
        return False
    readers = [u for u in write.users if not _is_write_back_or_chain(u)]
    if not readers:
        return False
    for user in readers:
        if user.op != "call_function" or getattr(user.target, "overloadpacket", None) not in _SUB_VIEW_OPS:
            return False  # a whole-tensor reader (or one we cannot size): Inductor realizes the scatter
        part = _numel(user)
        if part is None or part >= whole:
            return False  # a view of all of it reads it whole
    return True


def _is_write_back_or_chain(user: torch.fx.Node, permutes_only: bool = True) -> bool:
    """The ``copy_`` epilogue, the next functional write of the chain, or a view of the value that only
    those read (``copy_(k, permute(select_scatter(permute(k), x, 0, 2)))`` for ``k.t()[2] = x``: Inductor
    computes the scatter inside the write-back's loop, as when there is no view between them).

    ``permutes_only``: only a permutation of the value counts as such a view. A reshape or a dtype view
    between the scatter and its write-back (``view``, ``unsqueeze``, ``view.dtype``) is seen in Inductor's
    code to realize the scatter into a pool-sized buffer."""
    if user.op != "call_function":
        return False
    if user.target is _aten.copy_.default or is_functional_write(user):
        return True
    if aliased_input(user) is None or not user.users:
        return False
    if permutes_only and getattr(user.target, "overloadpacket", None) not in _PERMUTE_OPS:
        return False
    return all(_is_write_back_or_chain(u, permutes_only) for u in user.users)


# views that only reorder the dimensions: a scatter written back through them stays one pass
_PERMUTE_OPS: frozenset[object] = frozenset(
    getattr(_aten, name) for name in ("permute", "transpose", "t", "alias") if hasattr(_aten, name)
)


def _numel(node: torch.fx.Node) -> int | None:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    numel = val.numel()
    if isinstance(numel, torch.SymInt):  # symbolic: its value if known, never int() (that would add a guard)
        return numel.node.maybe_as_int()
    return int(numel)


def whole_pool_passes(graph: torch.fx.Graph, written_back_clones: Collection[str] = ()) -> list[str]:
    """Notes for written-back view scatters lowered as one pass over the input, with no buffer."""
    out: list[str] = []
    for _copy_node, _, src in write_backs(graph):
        hit = _first_write_on_input(src)
        if hit is None or _scatters_back_clones(hit[2], written_back_clones):
            continue
        for write in hit[2]:
            if not allocates_buffer(write):
                geo = geometry_of(write.meta.get("val"))
                size = f" ({geo.nbytes} bytes read and written per call)" if geo is not None else ""
                out.append(
                    f"{write.name}: {op_name(write.target)} into {hit[1].name} is one read-modify-write pass over "
                    f"the whole buffer{size}, with no buffer of its own: not counted as a copy"
                )
    return out


def find_aten_write_copies(graph: torch.fx.Graph, written_back_clones: Collection[str] = ()) -> list[CloneSite]:
    """Functional ATen writes whose whole-buffer result the ``copy_`` epilogue writes into an input.

    One site per buffer the generated code allocates: every write of a chain that
    :func:`allocates_buffer` (two kept ``index_put`` into one pool are two buffers; a view
    scatter fused into the write-back is none); ``arg`` is ``"self"``, ``nbytes`` the size of
    the written buffer, ``written`` the write-back of the chain's last write.
    A chain that only scatters ``written_back_clones`` (names of functionalization-clone
    nodes already reported) back into the input is their write-back, not a copy of its own.
    A view scatter that writes back the result of a functional write into a view of the same input
    (``kv[:, 0][blocks, offs] = x``: ``select_scatter(kv, index_put(select(kv)))``) is that write's
    buffer, the size of the view: one site, the inner write's (:func:`_inner_write`). When that scatter may be
    realized as well (written back through a dtype view or a reshape, or read besides:
    ``raw.view(torch.float32)[slots, :4] = x`` copies the whole ``raw`` into a buffer of its own), it is a
    site too, Inductor's choice, settled from the generated code.
    """
    inputs = placeholder_indices(graph)
    found: dict[torch.fx.Node, CloneSite] = {}
    for copy_node, _, src in write_backs(graph):
        hit = _first_write_on_input(src)
        if hit is None:
            continue
        _, placeholder, chain = hit
        if _scatters_back_clones(chain, written_back_clones):
            continue
        dst_geo = geometry_of(copy_node.args[0].meta.get("val"))  # type: ignore[union-attr]
        for write in chain:
            inner = _inner_write(write, placeholder)
            if inner is not None:
                scattered = geometry_of(write.args[1].meta.get("val"))  # type: ignore[union-attr]
                if inner not in found:
                    site = _write_site(inner, placeholder, inputs[placeholder], (scattered,) if scattered else ())
                    if site is not None:
                        found[inner] = site
            if not allocates_buffer(write):
                continue  # an inner write's scatter fused into the write-back: that write's buffer is the only one
            written = (dst_geo,) if dst_geo is not None and write is chain[0] else ()
            site = _write_site(write, placeholder, inputs[placeholder], written)
            prior = found.get(write)
            if prior is not None:
                if written:
                    found[write] = _with_written(prior, written[0])
            elif site is not None:
                found[write] = site
    return list(found.values())


def _inner_write(write: torch.fx.Node, placeholder: torch.fx.Node) -> torch.fx.Node | None:
    """The functional write (not a view scatter) whose result a view scatter writes back into a view of
    ``placeholder`` (through nested view scatters), when that write's ``self`` is a view of the same input."""
    if not is_view_scatter(write):
        return None
    cur = view_chain_root(write.args[1])[0]  # type: ignore[arg-type]
    while is_view_scatter(cur):
        cur = view_chain_root(cur.args[1])[0]  # type: ignore[arg-type]
    if not is_functional_write(cur):
        return None
    base = view_chain_root(cur.args[0])[0]  # type: ignore[arg-type]
    while is_functional_write(base):  # ``v = kv[:, 1]`` re-read from the K write's result: the same input
        base = view_chain_root(base.args[0])[0]  # type: ignore[arg-type]
    return cur if base is placeholder else None


def _write_site(
    write: torch.fx.Node, placeholder: torch.fx.Node, index: int, written: tuple[TensorGeometry, ...]
) -> CloneSite | None:
    out_geo = geometry_of(write.meta.get("val"))
    if out_geo is None:
        return None  # no fake value: size unknown (never seen on a post-grad graph)
    self_geo = geometry_of(write.args[0].meta.get("val"))  # type: ignore[union-attr]
    collective = getattr(write.target, "overloadpacket", None) in COLLECTIVE_WRITE_OPS
    return CloneSite(
        op=op_name(write.target),
        arg=write.target._schema.arguments[0].name,  # type: ignore[union-attr]  # "self"; a collective's "input"
        clone_node=write.name,
        placeholder=placeholder.name,
        placeholder_index=index,
        clone=out_geo,
        view=self_geo,
        clone_source_offset=self_geo.storage_offset if self_geo is not None else None,
        clones_whole_input=False,
        clone_is_input=write.args[0] is placeholder,
        kind=CopyKind.COLLECTIVE_COPY if collective else CopyKind.ATEN_WRITE_COPY,
        written=written,
        clone_source=self_geo,
        view_in_input_storage=True,
        buffer_is_inductors_choice=is_view_scatter(write),
        choice_reason=buffer_choice_reason(write) if is_view_scatter(write) else "",
        feeds=_scattered_writes(write),
    )


def _scattered_writes(write: torch.fx.Node) -> tuple[str, ...]:
    """Names of the functional writes (and view scatters) whose value a view scatter writes into its ``self``."""
    if not is_view_scatter(write):
        return ()
    out: list[str] = []
    base = view_chain_root(write.args[0])[0]  # type: ignore[arg-type]
    cur = view_chain_root(write.args[1])[0]  # type: ignore[arg-type]
    # down to the scatter's own ``self``: the input's state before this write (an earlier scatter of the
    # chain, ``select_scatter_default_5`` under ``kv[1, 1].index_copy_``) is that site's value, not one it scatters
    while is_functional_write(cur) and cur is not base:
        out.append(cur.name)
        cur = view_chain_root(cur.args[1] if is_view_scatter(cur) else cur.args[0])[0]  # type: ignore[arg-type]
    return tuple(out)


def _with_written(site: CloneSite, geo: TensorGeometry) -> CloneSite:
    import dataclasses

    return dataclasses.replace(site, written=(*site.written, geo))


__all__ = [
    "COLLECTIVE_WRITE_OPS",
    "FUNCTIONAL_WRITE_OPS",
    "allocates_buffer",
    "buffer_choice_reason",
    "find_aten_write_copies",
    "is_functional_write",
    "lowered_by_aten",
    "read_only_through_sub_views",
    "whole_pool_passes",
]
