"""Per-call pool attribution from the runtime tensors each compiled graph receives.

Every call of a compiled inner graph is observed (no cap): which named pools its inputs
overlap (a named pool no region ever receives is reported), and, for each copy site and
each functionalized mutated argument, which pool it hits and how many bytes it copies
*on that call* (symbolic sizes are evaluated from that call's inputs). Results are kept
as distinct hits, each with the number of calls it ran on (a graph called once per layer copies
one layer's pool per call, never every layer's); a call whose watched inputs repeat an earlier
call's costs one tuple lookup and a counter increment per copy site.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from compile_checks.check.graph.functionalized import FunctionalizedArg
from compile_checks.check.graph.geometry import (
    StorageRef,
    SymbolBinder,
    TensorGeometry,
    UnresolvedSizeError,
    bind_symbols,
)
from compile_checks.check.graph.overlap import contains, views_overlap
from compile_checks.check.graph.sites import CloneSite
from compile_checks.check.storage_identity import storage_key

# distinct input geometries whose touched pools are remembered (a region's inputs repeat from call to call)
_TOUCHED_CACHE = 4096


def _span(ref: StorageRef) -> tuple[int, int]:
    return ref.geometry.element_span()


class PoolIndex:
    """The caller's named pools, indexed by storage (:func:`~compile_checks.check.storage_identity.storage_key`)."""

    def __init__(self, pools: Mapping[str, torch.Tensor] | None) -> None:
        self.reset(pools)

    def reset(self, pools: Mapping[str, torch.Tensor] | None) -> None:
        """Index ``pools`` (again: a rebuilt cache keeps its names, its tensors are new)."""
        self.refs: dict[str, StorageRef] = {n: StorageRef.of(t) for n, t in (pools or {}).items()}
        self.by_ptr: dict[int, dict[str, StorageRef]] = {}
        self._touched: dict[StorageRef, list[str]] = {}
        for name, ref in self.refs.items():
            self.by_ptr.setdefault(ref.data_ptr, {})[name] = ref

    def __bool__(self) -> bool:
        return bool(self.refs)

    def touched(self, t: torch.Tensor) -> list[str]:
        """Named pools the tensor's view shares an element with (by strides: ``kv[:, 0]`` touches K, not
        the interleaved V whose byte span it overlaps). Answers are kept per geometry (a region's inputs
        repeat from call to call)."""
        same = self.by_ptr.get(storage_key(t))
        if not same:
            return []
        ref = StorageRef.of(t)
        hit = self._touched.get(ref)
        if hit is None:
            hit = [n for n, r in same.items() if views_overlap(r.geometry, ref.geometry)]
            if len(self._touched) < _TOUCHED_CACHE:
                self._touched[ref] = hit
        return hit

    def match(self, view: StorageRef | None, placeholder: StorageRef) -> str | None:
        """Pool a mutated view belongs to: exact geometry, else smallest containing, else same storage."""
        same = self.by_ptr.get(placeholder.data_ptr)
        if not same:
            return None
        if view is not None:
            for n, r in same.items():
                if (r.storage_offset, r.shape, r.stride) == (view.storage_offset, view.shape, view.stride):
                    return n
            # a pool whose span holds the view and that shares its elements: of K and V interleaved in one
            # storage (``kv[:, 0]`` / ``kv[:, 1]``), both spans hold a block of K, only K shares its elements
            containing = [(n, r) for n, r in same.items() if contains(r.geometry, view.geometry)]
            if containing:
                return min(containing, key=lambda nr: _span(nr[1])[1] - _span(nr[1])[0])[0]
            # the written view lies outside every named pool of that storage (an unnamed view of
            # it, another layer's slice): pinning it on a named neighbour would be a wrong name
            return None
        for n, r in same.items():
            if (r.storage_offset, r.shape, r.stride) == (
                placeholder.storage_offset,
                placeholder.shape,
                placeholder.stride,
            ):
                return n
        return next(iter(same))


@dataclass(frozen=True)
class CopyHit:
    """One distinct (copy site, pool, bytes) seen at runtime."""

    site: int
    pool: str | None
    nbytes: int
    shape: tuple[int, ...]
    written_bytes: int


@dataclass(frozen=True)
class ArgHit:
    """One distinct (functionalized mutated argument, pool) seen at runtime."""

    arg: int
    pool: str | None


@dataclass
class CallRecorder:
    """Attributes each call of one compiled inner graph; see the module docstring."""

    pools: PoolIndex
    sites: Sequence[CloneSite]
    functionalized: Sequence[FunctionalizedArg]
    binders: Sequence[SymbolBinder]
    received: set[str]
    # compile-time geometry of each graph input (placeholder order): graph offsets are relative to it
    inputs: Sequence[TensorGeometry | None] = ()
    # distinct (site, pool, bytes) -> how many calls ran it
    copy_hits: dict[CopyHit, int] = field(default_factory=dict)
    arg_hits: set[ArgHit] = field(default_factory=set)
    problems: set[str] = field(default_factory=set)
    # every input's storage geometry, once per distinct watched key (explanations name the
    # pool behind a non-mutated input from it: "`v_pool` shares one storage with `k_pool` (layer0.k)")
    signatures: list[tuple[StorageRef | None, ...]] = field(default_factory=list)
    # watched key -> the copy hits a call with that key runs
    _seen: dict[tuple, tuple[CopyHit, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        watched = {s.placeholder_index for s in self.sites}
        watched |= {f.placeholder_index for f in self.functionalized if f.placeholder_index is not None}
        self._watched = sorted(watched)

    def observe(self, args: Sequence[object]) -> None:
        """Record one call's inputs (placeholder order)."""
        if self.pools:
            for a in args:
                if isinstance(a, torch.Tensor):
                    self.received.update(self.pools.touched(a))
        refs = tuple(
            StorageRef.of(a) if isinstance(a := (args[i] if i < len(args) else None), torch.Tensor) else None
            for i in self._watched
        )
        bindings = bind_symbols(self.binders, args) if self.binders else {}
        key = (refs, tuple(sorted((str(k), v) for k, v in bindings.items())))
        hits = self._seen.get(key)
        if hits is None:
            self.signatures.append(tuple(StorageRef.of(a) if isinstance(a, torch.Tensor) else None for a in args))
            by_index = dict(zip(self._watched, refs))
            hits = tuple(
                self._attribute_site(i, site, by_index.get(site.placeholder_index), bindings)
                for i, site in enumerate(self.sites)
            )
            self._seen[key] = hits
            for i, fa in enumerate(self.functionalized):
                ref = by_index.get(fa.placeholder_index) if fa.placeholder_index is not None else None
                self.arg_hits.add(ArgHit(i, self._arg_pool(fa, ref, bindings)))
        for hit in hits:
            self.copy_hits[hit] = self.copy_hits.get(hit, 0) + 1

    def _attribute_site(self, i: int, site: CloneSite, ph: StorageRef | None, bindings: dict) -> CopyHit:
        """What copy site ``i`` copies on a call with these inputs: its pool and its bytes at this call's sizes."""
        try:
            clone = site.clone.resolve(bindings)
            written = sum(g.resolve(bindings).nbytes for g in site.written)
            view = site.real_view(ph, bindings, self._input(site.placeholder_index)) if ph is not None else None
        except UnresolvedSizeError as e:
            self.problems.add(f"{site.op} argument {site.arg!r} (node {site.clone_node}): bytes unknown, {e}")
            clone, written, view = site.clone, sum(g.nbytes for g in site.written), None
        pool = self.pools.match(view, ph) if (ph is not None and self.pools) else None
        return CopyHit(i, pool, clone.nbytes, clone.shape, written)

    def _arg_pool(self, fa: FunctionalizedArg, ref: StorageRef | None, bindings: dict) -> str | None:
        if ref is None or not self.pools:
            return None
        view = ref
        if fa.view is not None:
            try:
                g = fa.view.resolve(bindings)
            except UnresolvedSizeError:
                return self.pools.match(None, ref)
            shift = 0
            compiled = self._input(fa.placeholder_index) if fa.placeholder_index is not None else None
            if compiled is not None:
                try:
                    shift = ref.storage_offset - compiled.resolve(bindings).storage_offset
                except UnresolvedSizeError:
                    return self.pools.match(None, ref)
            view = StorageRef(ref.data_ptr, g.storage_offset + shift, g.shape, g.stride, g.dtype)
        return self.pools.match(view, ref)

    def _input(self, index: int) -> TensorGeometry | None:
        return self.inputs[index] if index < len(self.inputs) else None


def match_pool(view: StorageRef | None, placeholder: StorageRef, pools: Mapping[str, torch.Tensor]) -> str | None:
    """Name of the pool a mutated view belongs to (see :meth:`PoolIndex.match`)."""
    return PoolIndex(pools).match(view, placeholder)


__all__ = ["ArgHit", "CallRecorder", "CopyHit", "PoolIndex", "match_pool"]
