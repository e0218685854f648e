"""Turn what the probe saw into a :class:`CloneReport`: copies, pools, blind spots, failures.

Pools and bytes come from the runtime hits each compiled graph recorded on every call
(:mod:`compile_checks.check.runtime_pools`), each entry with the number of calls it ran on (a graph
called once per layer lists one entry per layer's pool, each charged only its own calls). For a fused
``(2, N, H, D)`` allocation both ``layer0.k`` and ``layer0.v`` share the pointer and the view's
storage offset tells them apart; under ``dynamic=True`` each size gets its own bytes. Nothing the probe could not
see is dropped: it becomes ``unanalysed`` (with its reason) or an ``error``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from compile_checks.check.backend import InnerGraph, Probe, Region
from compile_checks.check.findings import CloneReport, MutatedArgRecord, RegionSources, SurvivingClone
from compile_checks.check.graph.blind_spots import blind_spot
from compile_checks.check.graph.functionalized import FunctionalizedArg
from compile_checks.check.graph.fx_helpers import layer_of
from compile_checks.check.graph.sites import CloneSite
from compile_checks.check.reinplace_counters import disagreement_note
from compile_checks.check.runtime_pools import match_pool
from compile_checks.vocab import BlindSpot, CopyKind

__all__ = ["build_report", "match_pool"]


def build_report(
    probe: Probe,
    pools: Mapping[str, torch.Tensor] | None,
    dump_dir: str | None = None,
    allow_unanalysed: bool = False,
) -> CloneReport:
    """One clone entry per distinct (copy site, pool, bytes) seen at runtime; failures listed."""
    named = bool(pools)
    report = CloneReport(num_regions=len(probe.regions), dump_dir=dump_dir, allow_unanalysed=allow_unanalysed)
    for region in probe.regions:
        report.region_calls[region.index] = region.calls
        report.region_kernel_bytes[region.index] = region.kernel_bytes
        report.region_phase_seconds[region.index] = dict(region.phase_seconds)
        report.unanalysed += _unanalysed(region)
        report.sources[region.index] = RegionSources(
            region.compiled_fn_name,
            region.compile_seconds,
            region.captured_code,
            tuple(i.post_grad_code for i in region.inner if i.post_grad_code),
            tuple(i.generated_code for i in region.inner if i.generated_code),
        )
        for inner in region.inner:
            _add_mutated_args(report, region, inner)
            _add_clones(report, region, inner, named)
            report.errors += [f"region {region.index}: {m}" for m in inner.misplaced]
            report.notes += [f"region {region.index}: {n}" for n in inner.notes]
            recorder = inner.recorder
            if recorder is not None:
                report.errors += [f"region {region.index}: {p}" for p in sorted(recorder.problems)]
            _cross_check(region.index, inner.functionalized, inner.clone_sites, report.notes)
            counted = disagreement_note(region.index, inner.reinplace_missed_bytes, inner.clone_sites)
            report.notes += [counted] if counted else []
    if not probe.regions:
        # nothing compiled is nothing checked: dynamo disabled (TORCHDYNAMO_DISABLE=1,
        # set_stance("force_eager")), a driver that ran no step, an AOTInductor package
        report.errors.append(
            "no compiled region: torch.compile compiled nothing through the check, so nothing was checked "
            "(dynamo disabled by TORCHDYNAMO_DISABLE=1 or torch.compiler.set_stance('force_eager'), a driver "
            "that ran no step, code compiled outside the check such as an AOTInductor package, or a copy of the "
            "backend recording into a copy of the check: a deep-copied bound method or wrapper of it, as "
            "transformers' CompileConfig.to_dict() deep-copies its backend; hand over check.backend itself, "
            "which copy.deepcopy returns unchanged)"
        )
        report.unreceived_pools = list(pools or {})
        return report
    # pools a region replaced by another tensor (an out-of-place update rebound): a whole-pool copy per call
    report.clones += probe.identity.clones()
    report.notes += probe.identity.notes(report.region_calls)
    # two names for one tensor never get here: CloneCheck's pools pass compile_checks.pools.validate_pools
    for name, tensor in (pools or {}).items():
        if tensor.numel() == 0:
            # nothing to copy, and no compiled graph can be told to have received it
            report.notes.append(f"named pool {name!r} has no elements: nothing can be copied, not tracked")
            continue
        if name not in probe.received_pools and name in probe.reached_by_name:
            report.notes.append(
                f"named pool {name!r} is no graph input: an opaque op reached it by name while the compiled "
                "model ran (nothing Inductor can copy)"
            )
        elif name not in probe.received_pools:
            report.unreceived_pools.append(name)
            report.errors.append(
                f"named pool {name!r} was never received by any compiled region "
                "(a stale or rebuilt tensor? its copies could not be seen)"
            )
    return report


def _unanalysed(region: Region) -> list[str]:
    """Why (parts of) a region could not be analysed, each with how to avoid it; empty when all of it was.

    A graph Inductor does not lower (no call node: :attr:`InnerGraph.nothing_to_lower`) is analysed:
    it has nothing to copy or write, whether or not a post-grad hook could have fired for it.
    """
    where = f"region {region.index} ({region.compiled_fn_name})"
    if not region.inner:
        return [blind_spot(BlindSpot.NO_INNER_GRAPH, where)]
    out: list[str] = []
    for inner in region.inner:
        if inner.nothing_to_lower:
            continue
        if inner.is_backward:
            out.append(blind_spot(BlindSpot.BACKWARD, where))
        elif not inner.post_grad_seen:
            out.append(blind_spot(BlindSpot.NO_POST_GRAD, where))
        out += [blind_spot(kind, where, detail) for kind, detail in inner.blind_spots]
    return out


def _add_mutated_args(report: CloneReport, region: Region, inner: InnerGraph) -> None:
    hits = inner.recorder.arg_hits if inner.recorder is not None else set()
    for i, fa in enumerate(inner.functionalized):
        names = sorted({h.pool for h in hits if h.arg == i}, key=lambda n: (n is None, n or "")) or [None]
        for name in names:
            report.mutated_args.append(
                MutatedArgRecord(op=fa.op, arg=fa.arg, reinplaced=not bool(fa.cloned), region=region.index, pool=name)
            )


def _add_clones(report: CloneReport, region: Region, inner: InnerGraph, named: bool) -> None:
    hits = inner.recorder.copy_hits if inner.recorder is not None else {}
    for i, site in enumerate(inner.clone_sites):
        site_hits = sorted((h for h in hits if h.site == i), key=lambda h: (h.pool is None, h.pool or "", h.nbytes))
        if not site_hits:
            # compiled but never run in the session: report the compile-time geometry, run on no call
            site_hits = [None]  # type: ignore[list-item]
        name = _input_name(region, inner, site)
        for hit in site_hits:
            clone = _clone(site, region, hit, hits.get(hit, 0) if hit is not None else 0, name)
            if clone.upper_bound:  # no generated code settled it: undecided, never a copy
                target = report.undecided
            else:
                target = report.other_clones if (named and clone.pool is None) else report.clones
            target.append(clone)


def _input_name(region: Region, inner: InnerGraph, site: CloneSite) -> str:
    """The caller's tensor a site copies: the dynamo source of its graph input (Inductor's inner graph takes
    the dynamo graph's inputs in order), else ``input N``; never the ATen argument it is passed as."""
    sources = region.input_sources
    source = sources[site.placeholder_index] if len(sources) == len(inner.inputs) > site.placeholder_index else None
    return source or f"input {site.placeholder_index}"


def _clone(site: CloneSite, region: Region, hit: object, calls: int, input_name: str | None = None) -> SurvivingClone:
    """One copy entry: the site, the pool and bytes of the calls that hit it, and how many calls did."""
    pool = getattr(hit, "pool", None)
    return SurvivingClone(
        op=site.op,
        arg=site.arg,
        nbytes=getattr(hit, "nbytes", site.clone.nbytes),
        shape=getattr(hit, "shape", site.clone.shape),
        dtype=site.clone.dtype,
        pool=pool,
        layer=layer_of(pool),
        region=region.index,
        node=site.clone_node,
        kind=site.kind,
        written_bytes=getattr(hit, "written_bytes", sum(g.nbytes for g in site.written)),
        calls=calls,
        upper_bound=site.buffer_is_inductors_choice,
        input=input_name,
    )


def _cross_check(
    region: int, functionalized: list[FunctionalizedArg], sites: list[CloneSite], notes: list[str]
) -> None:
    """Note where the reinplace decision (meta) and the final graph disagree (custom-op clones only)."""
    cloned = {(f.op, f.arg) for f in functionalized if f.cloned}
    found = {
        pair for s in sites if s.kind == CopyKind.FUNCTIONALIZATION_CLONE for pair in ((s.op, s.arg), *s.also_feeds)
    }
    for op, arg in sorted(cloned - found):
        notes.append(
            f"region {region}: reinplace kept a clone for {op}.{arg} whose value is never written back into "
            "a caller tensor (a copy the program asked for, e.g. x.clone(), not a pool copy)"
        )
    functionalized_ops = {f.op for f in functionalized}
    for op, arg in sorted(found - cloned):
        # an ATen in-place op writing through the clone was never auto_functionalized: no decision to compare
        if op in functionalized_ops:
            notes.append(f"region {region}: a clone feeds {op}.{arg} though reinplace did not ask for one")
