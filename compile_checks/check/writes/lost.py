"""Lost writes: the compiled run did not write what the eager run wrote; the eager reference it is compared with.

AOT autograd's dead-code elimination drops a no-mutation op whose output is unused before the
post-grad graph; Inductor's lowering/codegen drops one whose output only feeds a size-0 reduction.
Neither shows in any graph the copy check reads, so :func:`eager_reference` runs the code eagerly
(:mod:`.calls`: one compiled call's own captured graph, on that call's inputs) under an
:class:`~.undo.UndoLog` (the pre-image of every element any op writes into any tensor that existed
before), keeps, per named pool, the elements eager wrote (storage offsets in the pool's own elements,
whatever dtype view wrote them; values after; whether they depend on the RNG), rolls every write back
and reads the same elements again (their values before). :meth:`EagerReference.compare` then reads
them after the compiled run:

* an element eager changed that the compiled run left as it was: never written (``lost_write``);
* a deterministic element the compiled run wrote differently: beyond a per-row tolerance (the row is
  the last dim: one K/V vector), so one large value elsewhere cannot hide a lost row;
* an element that depends on the RNG is compared by whether it was written, never by value;
* on a scanned pool (per-dim checksums taken before the run), elements written only by the compiled
  run; when the compiled run also left eager's elements unwritten, or the rollback did not put the
  pool back, the two runs did not start from the same state: ``diverged_state``, never ``lost_write``.

Cost: one eager run under the log; extra memory O(elements written): pre-images, eager's values and
one storage offset per written element; a scanned pool adds one checksum per index of each dim.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from compile_checks.check.writes.drawn import moved_count, written_groups
from compile_checks.check.writes.finding import WriteFinding
from compile_checks.check.writes.positions import (
    changed_indices,
    coordinates,
    describe,
    dim_checksums,
    flat_view,
    per_dim,
    written_dim,
)
from compile_checks.check.writes.undo import LoggedWrite, UndoLog, storage_key
from compile_checks.vocab import WriteProblem

# relative tolerance per dtype, of the largest |eager value| in the element's row (its last dim)
ROW_TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}
# eager's values of the written elements go to the host beyond this many bytes per pool
HOST_BYTES = 64 << 20


@dataclass
class PoolWrites:
    """The elements of one named pool the eager run wrote (and, when scanned, the pool's per-dim checksums)."""

    offsets: torch.Tensor  # storage offsets in the pool's elements, unique
    before: torch.Tensor  # values at the start (read back after the rollback)
    eager: torch.Tensor  # values after the eager run
    random: torch.Tensor  # bool: the last write depended on the RNG
    writers: list[str]
    checksums: list[torch.Tensor] | None = None  # per-dim checksums at the start; None: not scanned
    restored: bool = True  # the rollback put the pool back (checked when scanned)
    group: torch.Tensor | None = None  # long: which logged write last wrote each element (None: one write)
    random_positions: torch.Tensor | None = None  # bool: the last write's positions depended on the RNG


def _pool_offsets(pool: torch.Tensor, w: LoggedWrite) -> torch.Tensor | None:
    """The storage offsets, in ``pool``'s elements, of the elements a logged write wrote (a dtype view of the
    pool, fp8 over uint8, complex over float, int32 over float32, writes whole or partial pool elements)."""
    o = w.footprint.offsets().to(pool.device)
    if o.numel() != w.saved.numel():  # the tensor was resized since: its rollback fails and says so
        return None
    written, own = w.footprint.tensor.element_size(), pool.element_size()
    if written == own:
        return o
    if written > own and written % own == 0:  # each written element spans several of the pool's
        ratio = written // own
        return (o.unsqueeze(1) * ratio + torch.arange(ratio, device=o.device)).reshape(-1)
    return (o * written).div(own, rounding_mode="floor")  # a part of one of the pool's elements


def _pool_writes(pool: torch.Tensor, writes: list[LoggedWrite]) -> PoolWrites:
    # a pool that is its whole storage holds every offset of it: no coordinates needed to tell
    whole = pool.is_contiguous() and pool.storage_offset() == 0 and flat_view(pool).numel() == pool.numel()
    offs, rand, moved, writers = [], [], [], []
    for w in writes:
        o = _pool_offsets(pool, w)
        if o is None:
            continue
        if not whole:
            inside = coordinates(pool, o)[1]
            if not bool(inside.all()):
                o = o[inside]
        if o.numel() == 0:
            continue
        offs.append(o)
        rand.append(w.random)
        moved.append(w.random_positions)
        writers += [] if w.op in writers else [w.op]
    if not offs:
        empty = torch.empty(0, dtype=torch.long, device=pool.device)
        return PoolWrites(empty, pool.new_empty(0), pool.new_empty(0), empty.bool(), [])
    o = torch.cat(offs) if len(offs) > 1 else offs[0]
    r, positions = _per_element(offs, rand), _per_element(offs, moved)
    # one write whose offsets are already sorted and unique (a slot write in order): nothing to sort
    if len(offs) == 1 and (o.numel() < 2 or bool((o[1:] > o[:-1]).all())):
        uniq, last_random, group, last_moved = o, r, None, positions
    else:
        uniq, inverse = torch.unique(o, return_inverse=True)
        order = torch.arange(o.numel(), device=o.device)
        last = torch.full_like(uniq, -1).scatter_reduce(0, inverse, order, "amax")
        last_random, last_moved = r[last], positions[last]
        index = torch.cat([torch.full((x.numel(),), i, dtype=torch.long, device=o.device) for i, x in enumerate(offs)])
        group = index[last] if any(rand) else None
    eager = flat_view(pool)[uniq]
    if eager.numel() * eager.element_size() > HOST_BYTES:
        eager = eager.cpu()
    return PoolWrites(uniq, pool.new_empty(0), eager, last_random, writers, group=group, random_positions=last_moved)


def _per_element(offs: list[torch.Tensor], flags: list[bool]) -> torch.Tensor:
    """One write's flag for each of its elements (one flag for all: no per-write tensors to build)."""
    device = offs[0].device
    if all(flags) or not any(flags):
        return torch.full((sum(x.numel() for x in offs),), flags[0], dtype=torch.bool, device=device)
    return torch.cat([torch.full((x.numel(),), f, dtype=torch.bool, device=device) for x, f in zip(offs, flags)])


@dataclass
class EagerReference:
    """Per named pool, the elements the eager run wrote; notes on what the run could not restore."""

    pools: dict[str, PoolWrites]
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    saved_bytes: int = 0

    def compare(self, pools: Mapping[str, torch.Tensor], *, scan: bool = True) -> list[WriteFinding]:
        """A ``lost_write`` (or ``diverged_state``) per pool the compiled run left different from eager.

        ``scan``: also look, in the scanned pools, for elements written only by the compiled run."""
        found = []
        for name, ref in self.pools.items():
            if ref.offsets.numel() == 0 and (ref.checksums is None or not scan):
                continue
            if name not in pools:
                self.notes.append(f"pool {name!r} is gone after the compiled run: not compared")
                continue
            if ref.checksums is not None and [len(c) for c in ref.checksums] != list(pools[name].shape or (1,)):
                self.notes.append(f"pool {name!r} has another shape after the compiled run: not compared")
                continue
            finding = _compare(name, pools[name].detach(), ref, scan)
            if finding is not None:
                found.append(finding)
        return found


def _differs(now: torch.Tensor, ref: PoolWrites, pool: torch.Tensor) -> torch.Tensor:
    """Deterministic elements beyond the per-row tolerance (exact for integers and bools)."""
    eager = ref.eager.to(now.device)
    exact = _same_bits(now, eager)
    if not (now.is_floating_point() or now.is_complex()) or now.element_size() == 1:  # fp8: bit-exact
        return ~exact
    if bool(exact.all()):  # bit for bit as eager: no tolerance to work out
        return ~exact
    rtol = ROW_TOLERANCE.get(now.dtype, 0.0)
    if pool.dim() and pool.is_contiguous():  # a row is shape[-1] consecutive offsets: no coordinates needed
        row_key = (ref.offsets - pool.storage_offset()).div(pool.shape[-1], rounding_mode="floor")
    else:
        coords = coordinates(pool, ref.offsets)[0]
        row_key = ref.offsets - coords[:, -1] * (pool.stride(-1) if pool.dim() else 0)
    # offsets are sorted: a contiguous pool's rows come in runs (unique_consecutive, no sort); else sort them
    mag = eager.abs().nan_to_num(0.0, 0.0, 0.0).float()
    width = pool.shape[-1] if pool.dim() else 1
    runs = row_key.view(-1, width) if row_key.numel() % width == 0 else None
    if pool.is_contiguous() and runs is not None and bool((runs == runs[:, :1]).all()):  # whole rows, in order
        tol = (rtol * mag.view(-1, width).amax(dim=1, keepdim=True)).expand(-1, width).reshape(-1)
    else:
        rows, inverse = torch.unique(row_key, return_inverse=True)
        scale = torch.zeros(rows.numel(), device=now.device).scatter_reduce(0, inverse, mag, "amax")
        tol = rtol * scale[inverse]
    d = (now.float() - eager.float()).abs() > tol
    return (d | (now.isnan() != eager.isnan())) & ~(now.isnan() & eager.isnan())


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Elements as integers of their width (bit-exact comparison whatever the dtype: fp8 has no ``==``)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool or t.element_size() == 1:
        return t.view(torch.uint8)
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bit for bit (a NaN is the NaN with its own bits: a pool may start as garbage)."""
    same = _bits(a) == _bits(b)
    return same.reshape(a.shape[0], -1).all(dim=1) if a.is_complex() else same


def _compare(name: str, pool: torch.Tensor, ref: PoolWrites, scan: bool) -> WriteFinding | None:
    flat = flat_view(pool)
    now = flat[ref.offsets] if ref.offsets.numel() else pool.new_empty(0)
    before, eager = ref.before.to(now.device), ref.eager.to(now.device)
    changed, eager_changed = ~_same_bits(now, before), ~_same_bits(eager, before)
    unwritten = ~changed & eager_changed
    moved = ref.random_positions if ref.random_positions is not None and bool(ref.random_positions.any()) else None
    if moved is not None:  # positions drawn at random: counted below, never compared element by element
        unwritten &= ~moved
    random_values = ref.random & ~moved if moved is not None else ref.random
    if bool((unwritten & random_values).any()):  # a random value may equal the pre-image: by write, not element
        unwritten &= ~(random_values & written_groups(changed, random_values, ref.group))
    differ = ~unwritten & ~ref.random & _differs(now, ref, pool) if now.numel() else unwritten
    shape = tuple(pool.shape)
    elsewhere: list[list[int]] = [[] for _ in shape]
    if (scan or moved is not None) and ref.checksums is not None:  # changes outside eager's elements
        with torch.inference_mode() if pool.is_inference() else torch.no_grad():
            flat[ref.offsets] = before
            try:
                sums = dim_checksums(pool)
            finally:
                flat[ref.offsets] = now
        elsewhere = changed_indices(ref.checksums, sums)
    by = ", ".join(ref.writers) or "an op the check did not see"
    if moved is not None and shape:
        short = moved_count(name, pool, ref.offsets, moved, changed & ~unwritten, eager_changed, elsewhere, ref.writers)
        if short is not None:
            return short
        elsewhere = [[] for _ in shape]  # the compiled run's own random positions: as many as eager's
    compiled_only = any(elsewhere)
    bad = unwritten | differ
    if not bool(bad.any()) and not compiled_only:
        return None
    coords = coordinates(pool, ref.offsets[bad])[0]
    where = per_dim(coords) if shape else [[]]
    n_unwritten, n_differ = int(unwritten.sum()), int(differ.sum())
    parts = [f"{n_unwritten} element(s) never written by the compiled run"] if n_unwritten else []
    parts += [f"{n_differ} written differently (beyond the per-row tolerance)"] if n_differ else []
    parts += [f"written only by the compiled run at {describe(shape, elsewhere)}"] if compiled_only else []
    nbytes = int(bad.sum()) * pool.element_size()
    dim = written_dim(shape, where) if shape else 0
    details: dict[str, Any] = {
        "dim": dim,
        "positions": {str(d): ix for d, ix in enumerate(where)},
        "unwritten_elements": n_unwritten,
        "different_elements": n_differ,
        "compiled_only": {str(d): ix for d, ix in enumerate(elsewhere)} if compiled_only else {},
        "eager_writers": list(ref.writers),
        "shape": list(shape),
    }
    rows = tuple(where[dim]) if shape and bool(bad.any()) else ()
    if shape and n_unwritten:  # positions along the written dim that the compiled run never wrote
        details["unwritten_rows"] = per_dim(coordinates(pool, ref.offsets[unwritten])[0])[dim]
    if bool(bad.any()) and (compiled_only or not ref.restored):  # the two runs did not start from the same state
        why = (
            "the eager run's writes could not all be undone"
            if not ref.restored
            else f"it wrote {describe(shape, elsewhere)}, which the eager run did not: an op keeps state outside the "
            "tensors it is given"
        )
        return WriteFinding(
            WriteProblem.DIVERGED_STATE,
            name,
            by,
            rows=rows,
            nbytes=nbytes,
            details=details,
            message=f"pool {name!r}: the compiled run left {describe(shape, where)} "
            f"{'unwritten' if n_differ == 0 else 'different from eager'} and started from another state than "
            f"the eager run ({why})",
        )
    if not bool(bad.any()):  # every element eager wrote is right; the compiled run wrote others too
        stray = written_dim(shape, elsewhere) if shape else 0
        return WriteFinding(
            WriteProblem.LOST_WRITE,
            name,
            by,
            rows=tuple(elsewhere[stray]) if shape else (),
            details={**details, "dim": stray},
            message=f"pool {name!r}: the compiled run also wrote {describe(shape, elsewhere)}, which the eager run "
            f"did not write (the elements eager wrote, with {by}, came out as eager's)",
        )
    return WriteFinding(
        WriteProblem.LOST_WRITE,
        name,
        by,
        rows=rows,
        nbytes=nbytes,
        details=details,
        message=f"pool {name!r}: {describe(shape, where)} differ from eager ({'; '.join(parts)}; {nbytes} bytes); "
        f"eager wrote them with {by}",
    )


def eager_reference(
    pools: Mapping[str, torch.Tensor],
    run: Callable[[], Any],
    *,
    scan: Collection[str] | None = None,
    scan_written: bool = True,
) -> EagerReference:
    """Run ``run()`` eagerly under an undo log, keep what it wrote in ``pools``, roll every write back.

    Every tensor the run writes is restored (not only ``pools``), with the CPU and CUDA RNG states.
    ``scan``: the pools checksummed per dim before the run (None: all of them), to check they are back
    after the rollback and to find, in :meth:`EagerReference.compare`, elements only the compiled run
    wrote; with ``scan_written`` a pool the run wrote that ``scan`` leaves out is checksummed after the
    rollback (to find compiled-only writes in it). ``scan=()`` and ``scan_written=False`` read only the
    written elements.
    """
    pools = {n: t.detach() for n, t in pools.items()}
    scanned = set(pools) if scan is None else set(scan) & set(pools)
    start = {n: dim_checksums(pools[n]) for n in scanned}
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    log = UndoLog()
    failed: list[str] = []
    try:
        with log:
            run()
        by_storage: dict[int, list[LoggedWrite]] = {}
        for w in log.writes:
            by_storage.setdefault(w.storage, []).append(w)
        # only the pools the run wrote (or that are scanned): a call touches a few of many
        written = {
            n: _pool_writes(t, by_storage.get(storage_key(t), []))
            for n, t in pools.items()
            if n in scanned or storage_key(t) in by_storage
        }
    finally:
        failed = log.rollback()
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    for n, pw in written.items():
        pw.before = flat_view(pools[n])[pw.offsets].to(pw.eager.device)
    ref = EagerReference(written, saved_bytes=log.saved_bytes)
    ref.errors += [f"the eager run could not undo a write of {f}" for f in failed]
    for op, nbytes in sorted(log.saved_whole.items()):
        ref.notes.append(
            f"{op} declares writing tensors it was given and has no registered write footprint: the eager run "
            f"saved them whole ({nbytes} bytes); compile_checks.check.writes.register_write_footprint names what it "
            "writes"
        )
    for n, t in pools.items():
        if n not in written:
            continue
        drawn = written[n].random_positions  # written at random positions: always scanned (compared by count)
        if n not in start:
            if (scan_written or (drawn is not None and bool(drawn.any()))) and written[n].offsets.numel():
                written[n].checksums = dim_checksums(t)  # written, not handed: its state after the rollback
            continue
        if [len(c) for c in start[n]] != list(t.shape or (1,)):
            ref.errors.append(f"pool {n!r} changed shape in the eager run: it cannot be compared")
            continue
        written[n].checksums = start[n]
        moved = changed_indices(start[n], dim_checksums(t))
        if any(moved):
            written[n].restored = False
            ref.errors.append(
                f"the eager run could not restore pool {n!r} ({describe(tuple(t.shape), moved)} still differ after "
                "the rollback): an op wrote it where the check cannot see (an opaque op's kernel that declares no "
                "write); register its write footprint, or Case(check_writes=False)"
            )
    return ref


def tensors_in(*objs: Any) -> list[torch.Tensor]:
    """The tensors in (nested tuples, lists, mappings of) ``objs``; a module's buffers."""
    out: list[torch.Tensor] = []
    for obj in objs:
        if isinstance(obj, torch.nn.Module):
            out += list(obj.buffers())
        elif isinstance(obj, torch.Tensor):
            out.append(obj)
        elif isinstance(obj, (list, tuple)):
            out += tensors_in(*obj)
        elif isinstance(obj, Mapping):
            out += tensors_in(*obj.values())
    return out


__all__ = ["HOST_BYTES", "ROW_TOLERANCE", "EagerReference", "PoolWrites", "eager_reference", "tensors_in"]
