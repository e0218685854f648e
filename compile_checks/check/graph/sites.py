"""A whole-buffer copy found in the final graph (:class:`CloneSite`), and the view-scatter ops
whose ``src`` is written back whole. Shared by both finders (copies, aten_writes)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx
from torch._inductor.fx_passes import reinplace as inductor_reinplace

from compile_checks.check.graph.geometry import StorageRef, TensorGeometry
from compile_checks.vocab import CopyKind


@dataclass(frozen=True)
class CloneSite:
    """A whole-buffer copy in the final graph that stands in for a mutated graph input.

    ``view`` is the tensor the op writes: relative to the clone's storage for a
    functionalization clone (``clone_source_offset`` is where the cloned buffer starts in the
    input's storage; when the input itself was cloned, ``clone_is_input``, the runtime input's
    own offset replaces it), in the input's own storage for an ATen write copy
    (``view_in_input_storage``). ``written`` is the destination of the ``copy_`` epilogue
    that writes the copy's new value back (None when there is none). Geometries may be
    symbolic: :meth:`real_view` / ``resolve`` evaluate them for one call.
    """

    op: str
    arg: str
    clone_node: str
    placeholder: str
    placeholder_index: int
    clone: TensorGeometry
    view: TensorGeometry | None
    clone_source_offset: int | None
    clones_whole_input: bool
    clone_is_input: bool = False
    kind: CopyKind = CopyKind.FUNCTIONALIZATION_CLONE
    written: tuple[TensorGeometry, ...] = ()
    clone_source: TensorGeometry | None = None
    view_in_input_storage: bool = False
    # other (op, argument) pairs written through the same copy (a shared v2 base, two ops on one
    # clone): one buffer in the generated code, so one site
    also_feeds: tuple[tuple[str, str], ...] = ()
    # a view scatter read besides its write-back (the window ``cache[:, :end]`` read after ``cache[:, a:b] =
    # x``, a whole-cache reader, symbolic sizes) or written back through a reshape or dtype view: whether it
    # gets a buffer is Inductor's lowering choice (it may compute it inside its readers and the write-back,
    # no buffer), so this site is an upper bound until a full compile's generated code says
    # (compile_checks.check.graph.generated_buffers)
    buffer_is_inductors_choice: bool = False
    # why it is Inductor's choice (the upper bound's reason), e.g. "reaches its write-back through a reshape"
    choice_reason: str = ""
    # functional writes whose value the site scatters into the input (``index_put`` into ``k.unsqueeze(0)[0]``,
    # scattered back by ``select_scatter``): Inductor may compute the copy's buffer from them
    feeds: tuple[str, ...] = ()

    def real_view(
        self, placeholder: StorageRef, bindings: dict, compiled_input: TensorGeometry | None = None
    ) -> StorageRef | None:
        """The written view mapped onto the placeholder's real storage for one call (None if unknown).

        Offsets in the graph are those of the compile-time (fake) input's storage. Inductor makes
        them relative to the input (``graph_input_storage_offsets``: a runtime input pointer
        already includes its own offset), so on a call whose input sits elsewhere in the same
        storage (``big[layer]`` reused for every layer) the copy is at
        ``runtime offset + (graph offset - compile-time input offset)``. ``compiled_input`` is
        that compile-time geometry; without it graph offsets are taken as absolute.
        """
        if self.view is None:
            return None
        view = self.view.resolve(bindings)
        shift = 0
        if compiled_input is not None:
            shift = placeholder.storage_offset - compiled_input.resolve(bindings).storage_offset
        if self.view_in_input_storage:
            offset = view.storage_offset + shift
        elif self.clone_is_input:
            # the input itself was cloned: the clone's offset 0 is the input's offset
            offset = placeholder.storage_offset + view.storage_offset
        elif self.clone_source is not None:
            offset = self.clone_source.resolve(bindings).storage_offset + shift + view.storage_offset
        else:
            return None
        return StorageRef(placeholder.data_ptr, offset, view.shape, view.stride, view.dtype)


# functional forms of a write into a *view* of ``self`` (``self[0] = src``, ``self[a:b] = src``): their
# ``src`` (argument 1) is written back whole. v1 ``auto_functionalized`` of a view of a graph input
# writes the op's new value back this way: ``copy_(kv, select_scatter(kv, new_k, 0, 0))``.
VIEW_SCATTER_OPS: frozenset[object] = frozenset(
    getattr(torch.ops.aten, name)
    for name in ("select_scatter", "slice_scatter", "as_strided_scatter", "diagonal_scatter")
    if hasattr(torch.ops.aten, name)
)


def is_view_scatter(node: torch.fx.Node) -> bool:
    """A call of one of :data:`VIEW_SCATTER_OPS` (any overload) whose ``self`` and ``src`` are nodes."""
    return (
        node.op == "call_function"
        and getattr(node.target, "overloadpacket", None) in VIEW_SCATTER_OPS
        and len(node.args) >= 2
        and all(isinstance(a, torch.fx.Node) for a in node.args[:2])
    )


def scattered_source(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node whose result a view scatter copies into its base: down the scatter's source, through views
    and the scatters of an enclosing view (``select_scatter(buf, select_scatter(buf[i], index_put(...)))``);
    None when the chain leaves the graph's op calls."""
    cur = node.args[1] if len(node.args) > 1 else None
    for _ in range(64):
        if not isinstance(cur, torch.fx.Node) or cur.op != "call_function":
            return None
        if is_view_scatter(cur):
            cur = cur.args[1] if len(cur.args) > 1 else None
        elif inductor_reinplace._is_view_op(cur.target):
            cur = cur.args[0] if cur.args else None
        else:
            return cur
    return None


__all__ = ["VIEW_SCATTER_OPS", "CloneSite", "is_view_scatter", "scattered_source"]
