"""Map clone sites (graph placeholders) to the caller's named pools, by storage.

A placeholder's runtime tensor gives the storage pointer; the view the op
receives gives offset/shape/stride inside it. For a fused ``(2, N, H, D)``
allocation both ``layer0.k`` and ``layer0.v`` share the pointer; the view's
storage offset tells them apart.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from compile_checks.backend import Probe, StorageRef
from compile_checks.findings import CloneReport, MutatedArgRecord, SurvivingClone
from compile_checks.graph_analysis import CloneSite, FunctionalizedArg, TensorGeometry, layer_of


def _span(ref: StorageRef) -> tuple[int, int]:
    geo = TensorGeometry(ref.shape, ref.stride, ref.storage_offset, ref.dtype)
    return geo.element_span()


def _real_view(site: CloneSite, placeholder: StorageRef) -> StorageRef | None:
    """The op's view mapped back onto the placeholder's real storage (None if unknown)."""
    if site.view is None or site.clone_source_offset is None:
        return None
    if site.clone_is_input:
        # the input itself was cloned: the clone's offset 0 is the input's offset
        offset = placeholder.storage_offset + site.view.storage_offset
    else:
        offset = site.clone_source_offset + site.view.storage_offset
    return StorageRef(placeholder.data_ptr, offset, site.view.shape, site.view.stride, site.view.dtype)


def match_pool(view: StorageRef | None, placeholder: StorageRef, pools: Mapping[str, torch.Tensor]) -> str | None:
    """Name of the pool a mutated view belongs to: exact geometry, else containing, else same storage."""
    refs = {name: StorageRef.of(t) for name, t in pools.items()}
    same = {n: r for n, r in refs.items() if r.data_ptr == placeholder.data_ptr}
    if not same:
        return None
    if view is not None:
        for n, r in same.items():
            if (r.storage_offset, r.shape, r.stride) == (view.storage_offset, view.shape, view.stride):
                return n
        vlo, vhi = _span(view)
        containing = [(n, r) for n, r in same.items() if _span(r)[0] <= vlo and _span(r)[1] >= vhi]
        if containing:
            return min(containing, key=lambda nr: _span(nr[1])[1] - _span(nr[1])[0])[0]
    for n, r in same.items():
        if (r.storage_offset, r.shape, r.stride) == (
            placeholder.storage_offset,
            placeholder.shape,
            placeholder.stride,
        ):
            return n
    return next(iter(same))


def _arg_pool(fa: FunctionalizedArg, sig: tuple[StorageRef | None, ...], pools: Mapping[str, torch.Tensor]) -> str | None:
    """Pool of a functionalized mutated argument: its base input's storage + the argument's view."""
    index = fa.placeholder_index
    if index is None or index >= len(sig) or sig[index] is None:
        return None
    ref = sig[index]
    assert ref is not None
    view = ref
    if fa.view is not None:
        view = StorageRef(ref.data_ptr, fa.view.storage_offset, fa.view.shape, fa.view.stride, fa.view.dtype)
    return match_pool(view, ref, pools)


def build_report(probe: Probe, pools: Mapping[str, torch.Tensor] | None, dump_dir: str | None = None) -> CloneReport:
    """Turn what the probe saw into a :class:`CloneReport` (one clone entry per distinct pool hit)."""
    pools = dict(pools or {})
    report = CloneReport(num_regions=len(probe.regions), dump_dir=dump_dir)
    for region in probe.regions:
        report.region_calls[region.index] = region.calls
        report.region_kernel_bytes[region.index] = region.kernel_bytes
        for inner in region.inner:
            sigs = inner.input_signatures or [()]
            for fa in inner.functionalized:
                names = {_arg_pool(fa, s, pools) for s in sigs} if pools else {None}
                for name in sorted(names, key=lambda n: (n is None, n or "")):
                    report.mutated_args.append(
                        MutatedArgRecord(op=fa.op, arg=fa.arg, reinplaced=not bool(fa.cloned), region=region.index, pool=name)
                    )
            for site in inner.clone_sites:
                seen: set[str | None] = set()
                for sig in sigs:
                    ph = sig[site.placeholder_index] if site.placeholder_index < len(sig) else None
                    name = None
                    if ph is not None and pools:
                        name = match_pool(_real_view(site, ph), ph, pools)
                    if name in seen:
                        continue
                    seen.add(name)
                    target = report.other_clones if (pools and name is None) else report.clones
                    target.append(
                        SurvivingClone(
                            op=site.op,
                            arg=site.arg,
                            nbytes=site.clone.nbytes,
                            shape=site.clone.shape,
                            dtype=site.clone.dtype,
                            pool=name,
                            layer=layer_of(name),
                            region=region.index,
                            node=site.clone_node,
                        )
                    )
            _cross_check(region.index, inner.functionalized, inner.clone_sites, report.notes)
    return report


def _cross_check(region: int, functionalized: list[FunctionalizedArg], sites: list[CloneSite], notes: list[str]) -> None:
    """Note where the reinplace decision (meta) and the final graph (clones found) disagree."""
    cloned = {(f.op, f.arg) for f in functionalized if f.cloned}
    found = {(s.op, s.arg) for s in sites}
    for op, arg in sorted(cloned - found):
        notes.append(f"region {region}: reinplace kept a clone of {op}.{arg} but no clone feeding it was found in the final graph")
    for op, arg in sorted(found - cloned):
        if functionalized:
            notes.append(f"region {region}: a clone feeds {op}.{arg} though reinplace did not ask for one")
