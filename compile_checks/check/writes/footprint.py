"""Write footprints: exactly which elements an op call writes, to save their pre-image and put it back.

Apart from the undo log (:mod:`.undo`) because the question "what does this call write?" has one
answer per op, read off its schema for ATen ops and from a small registry for opaque ops that declare
writing a big tensor (a paged KV write touches a few slots of a pool it declares whole). A
:class:`Footprint` is a tensor (or view) and how the written elements are selected from it: the
whole view, the indices along one dim (``index_copy_``), advanced indexing (``index_put_``), a
``gather``-style index (``scatter_``), a mask (``masked_fill_``) or flat indices (``put_``).

Every footprint answers three questions the same way: its pre-image (:meth:`Footprint.save`), how
to put a saved pre-image back (:meth:`Footprint.restore`), and the storage offsets of the elements
it selects, in the order of the saved values (:meth:`Footprint.offsets`), which is how the eager
reference names positions in the pool's own terms and compares the runs element by element.

Register the footprint of your own opaque op with :func:`register_write_footprint`; an opaque op
without one that declares ``Tensor(a!)`` arguments is saved whole (the eager reference notes it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from compile_checks.check.graph.fx_helpers import written_arguments
from compile_checks.check.writes.ops import declared_mutations

Select = Callable[[torch.Tensor], torch.Tensor]
Restore = Callable[[torch.Tensor, torch.Tensor], object]


@dataclass(frozen=True)
class Footprint:
    """The elements of ``tensor`` one call writes: ``select(tensor)`` gathers them, ``put(tensor, saved)`` writes
    them back. Build one with :meth:`whole`, :meth:`along`, :meth:`indexed`, :meth:`gathered`, :meth:`masked`
    or :meth:`flat`."""

    tensor: torch.Tensor
    select: Select | None = None  # None: the whole tensor
    put: Restore | None = None
    along_dim: tuple[int, torch.Tensor] | None = None  # (dim, index) of :meth:`along`: offsets without grids

    @classmethod
    def whole(cls, t: torch.Tensor) -> Footprint:
        """Every element of ``t`` (a view: only the view's elements)."""
        return cls(t)

    @classmethod
    def along(cls, t: torch.Tensor, dim: int, index: torch.Tensor) -> Footprint:
        """The slices ``index`` of ``t`` along ``dim`` (``index_copy_``, ``index_fill_``, a paged slot write);
        negative indices count from the end (``index_fill_`` takes them)."""
        index = index.detach().reshape(-1).to(torch.long).clone()
        if t.dim() > 0:
            index = torch.where(index < 0, index + t.shape[dim], index)
        return cls(
            t,
            lambda x: x.index_select(dim, index),
            lambda x, saved: x.index_copy_(dim, index, saved),
            along_dim=(dim, index) if t.dim() > 0 and t.shape[dim] > 0 else None,
        )

    @classmethod
    def indexed(cls, t: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> Footprint:
        """``t[indices]`` of advanced indexing (``index_put_``: long or bool index tensors, None for a full dim)."""
        idx = [None if i is None else i.detach().clone() for i in indices]
        return cls(
            t, lambda x: torch.ops.aten.index.Tensor(x, idx), lambda x, saved: torch.ops.aten.index_put_(x, idx, saved)
        )

    @classmethod
    def gathered(cls, t: torch.Tensor, dim: int, index: torch.Tensor) -> Footprint:
        """``t.gather(dim, index)`` (``scatter_`` and its reductions)."""
        index = index.detach().clone()
        return cls(t, lambda x: x.gather(dim, index), lambda x, saved: x.scatter_(dim, index, saved))

    @classmethod
    def masked(cls, t: torch.Tensor, mask: torch.Tensor) -> Footprint:
        """``t[mask]``, the mask broadcast to ``t`` (``masked_fill_``, ``masked_scatter_``)."""
        mask = mask.detach().clone()
        return cls(t, lambda x: x.masked_select(mask), lambda x, saved: x.masked_scatter_(mask, saved))

    @classmethod
    def flat(cls, t: torch.Tensor, index: torch.Tensor) -> Footprint:
        """Flat (row-major) indices of ``t`` (``put_``)."""
        index = index.detach().reshape(-1).to(torch.long).clone()
        return cls(t, lambda x: x.take(index), lambda x, saved: x.put_(index, saved))

    def save(self) -> torch.Tensor:
        """The selected elements' current values (a copy)."""
        with torch.no_grad():
            return self.tensor.detach().clone() if self.select is None else self.select(self.tensor.detach())

    def restore(self, saved: torch.Tensor) -> None:
        """Write ``saved`` (from :meth:`save`) back into the selected elements."""
        t = self.tensor
        with torch.inference_mode() if t.is_inference() else torch.no_grad():
            if self.put is None:
                t.copy_(saved)
            else:
                self.put(t.detach() if not t.is_inference() else t, saved)

    def offsets(self) -> torch.Tensor:
        """Storage offsets (in elements) of the selected elements, flattened in the order of :meth:`save`.

        Each coordinate of the view is selected from an expanded ``arange`` (no memory), so this costs
        one int64 per selected element per dim, never the tensor's size.
        """
        t = self.tensor
        if self.along_dim is not None:  # the offsets of one slice, shifted by each index's stride
            dim, index = self.along_dim
            one = Footprint(t.select(dim, 0)).offsets() - t.storage_offset()
            starts = index.to(t.device) * t.stride(dim) + t.storage_offset()
            shape = [-1] + [1] * (t.dim() - 1)
            moved = starts.reshape(shape) + one.reshape(t.select(dim, 0).shape).unsqueeze(0)
            return moved.movedim(0, dim).reshape(-1)
        out = torch.full((), t.storage_offset(), dtype=torch.long, device=t.device)
        if t.dim() == 0:
            return out.reshape(1)
        if self.select is None and t.is_contiguous():
            return torch.arange(t.numel(), device=t.device) + out
        total = None
        for d, (size, stride) in enumerate(zip(t.shape, t.stride(), strict=True)):
            shape = [1] * t.dim()
            shape[d] = size
            grid = torch.arange(size, device=t.device).reshape(shape).expand(t.shape)
            coord = grid if self.select is None else self.select(grid)
            term = coord.reshape(-1) * stride
            total = term if total is None else total + term
        assert total is not None
        return total + out


# op name (``ns::name`` or ``ns::name.overload``) -> footprints of one call, given its arguments by schema name
FootprintFn = Callable[[Mapping[str, Any]], list[Footprint]]
_REGISTRY: dict[str, FootprintFn] = {}


def register_write_footprint(op: str, footprint: FootprintFn) -> None:
    """Say which elements a call of the opaque op ``op`` (``"ns::name"``) writes.

    ``footprint(call)`` gets the call's arguments by schema name and returns the :class:`Footprint` s it
    writes. Without one the eager reference saves each ``Tensor(a!)`` argument whole (and says so).
    """
    _REGISTRY[op] = footprint


def bound_arguments(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """An op call's arguments by schema name (defaults left out)."""
    schema = func._schema
    call = {a.name: v for a, v in zip(schema.arguments, args, strict=False)}
    call.update(kwargs)
    return call


def _slots(call: Mapping[str, Any], pools: Sequence[str], mapping: str, flatten: bool) -> list[Footprint]:
    slots = call[mapping].reshape(-1)
    slots = slots[slots >= 0]  # vLLM pads with -1: those tokens are not written
    out = []
    for name in pools:
        pool = call[name]
        rows = pool.flatten(0, 1) if flatten and pool.dim() > 1 else pool
        out.append(Footprint.along(rows, 0, slots))
    return out


# vLLM's CPU kernels (csrc/cpu/cpu_attn_*.hpp, ``reshape_and_cache``) write a block's K column-major ([head_dim,
# block_size] per block and head) and its V row-major ([block_size, head_dim]) on these ISAs
_CPU_ATTN_COLUMN_MAJOR_K = frozenset({"vec", "vec16", "neon", "vsx", "vxe", "rvv"})


def cpu_attn_footprints(call: Mapping[str, Any]) -> list[Footprint]:
    """What ``_C::cpu_attn_reshape_and_cache`` writes: (blocks, H, block_size, D) K and V views of a layer's
    cache, slot = block * block_size + row. V: the row of each slot; K: the column ``row`` of the block's
    (head, D, block_size) column-major layout. Another ISA (``amx``: packed tiles) gets the written blocks
    whole, a superset its rollback can restore."""
    slots = call["slot_mapping"].reshape(-1).to(torch.long)
    slots = slots[slots >= 0]  # vLLM pads with -1: those tokens are not written
    key, value = call["key_cache"], call["value_cache"]
    rows = key.shape[2]
    block, row = slots // rows, slots % rows
    if str(call.get("isa", "")) not in _CPU_ATTN_COLUMN_MAJOR_K:
        touched = block.unique()
        return [Footprint.along(key, 0, touched), Footprint.along(value, 0, touched)]
    n, heads, _, dim = key.shape
    column_major = key.as_strided((n, heads, dim, rows), (key.stride(0), key.stride(1), rows, 1))
    return [
        Footprint.indexed(column_major.permute(0, 3, 1, 2), [block, row]),
        Footprint.indexed(value.transpose(1, 2), [block, row]),
    ]


def _builtin() -> None:
    # ar_paging's commit: flat pools (slots, H, D), one row per slot_mapping entry
    register_write_footprint(
        "ar_paging::paged_write", lambda c: _slots(c, ("k_pool", "v_pool"), "slot_mapping", flatten=False)
    )
    # vLLM's flash layout (blocks, block_size, H, D): slot = block * block_size + offset
    register_write_footprint(
        "_C_cache_ops::reshape_and_cache_flash",
        lambda c: _slots(c, ("key_cache", "value_cache"), "slot_mapping", flatten=True),
    )
    # vLLM's CPU attention (its CPU build): K column-major, V row-major in each block (cpu_attn_footprints)
    register_write_footprint("_C::cpu_attn_reshape_and_cache", cpu_attn_footprints)


_builtin()


def op_footprints(func: Any, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Footprint] | None:
    """The registered footprints of an opaque op's call, or None when it has none registered."""
    fn = _REGISTRY.get(name) or _REGISTRY.get(name.partition(".")[0])
    return None if fn is None else fn(bound_arguments(func, args, kwargs))


# ATen ops whose schema does not declare what they write in training mode: batch norm's running stats
_RUNNING_STATS = frozenset({"native_batch_norm", "_native_batch_norm_legit", "cudnn_batch_norm", "miopen_batch_norm"})


def aten_footprints(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Footprint]:
    """What an ATen call writes: the indexed elements of index/scatter/mask writes, else each written argument."""
    name = func._schema.name.removeprefix("aten::")
    if name not in _RUNNING_STATS and not written_arguments(func):
        return []
    call = bound_arguments(func, args, kwargs)
    if name in _RUNNING_STATS:
        stats = [call.get("running_mean"), call.get("running_var")] if call.get("training") else []
        return [Footprint.whole(t) for t in stats if isinstance(t, torch.Tensor)]
    self = call.get("self")
    if isinstance(self, torch.Tensor) and self.dim() > 0:
        if name in ("index_copy_", "index_fill_", "index_add_", "index_reduce_"):
            return [Footprint.along(self, call["dim"], call["index"])]
        if name in ("index_put_", "_index_put_impl_"):
            return [Footprint.indexed(self, call["indices"])]
        if name in ("scatter_", "scatter_add_", "scatter_reduce_"):
            return [Footprint.gathered(self, call["dim"], call["index"])]
        if name in ("masked_fill_", "masked_scatter_"):
            return [Footprint.masked(self, call["mask"])]
        if name == "put_":
            return [Footprint.flat(self, call["index"])]
    return [Footprint.whole(t) for t in written_tensors(func, args, kwargs)]


def written_tensors(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
    """The tensors a call declares it writes (``Tensor(a!)`` arguments, lists flattened)."""
    return declared_mutations(func, args, kwargs)


__all__ = [
    "Footprint",
    "FootprintFn",
    "aten_footprints",
    "bound_arguments",
    "cpu_attn_footprints",
    "op_footprints",
    "register_write_footprint",
    "written_tensors",
]
