"""Lost writes: the compiled run never wrote what eager wrote; the eager reference it is compared with.

AOT autograd's dead-code elimination drops a no-mutation op whose output is unused before the
post-grad graph; Inductor's lowering/codegen drops one whose output only feeds a size-0 reduction.
Neither shows in any graph the copy check reads, so :func:`eager_reference` runs the case eagerly
from a snapshot (recording which op wrote which pool rows), restores the snapshot in place, and
:meth:`EagerReference.compare` diffs the compiled run's pools against it row by row (dim 0).
Cost: one eager run of the case and four copies of the pools (snapshot, before, after, shadow).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from compile_checks.check.writes.finding import WriteFinding
from compile_checks.check.writes.rows import changed_rows, fmt_rows, row_bytes, rows_view
from compile_checks.check.writes.watcher import WriteWatcher
from compile_checks.vocab import WriteProblem

# relative tolerance (of the pool's scale, max |eager|, at least 1) under which a row counts as equal
ROW_TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def _tensors(obj: Any, out: list[torch.Tensor], depth: int = 4) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif depth > 0 and isinstance(obj, (list, tuple)):
        for x in obj:
            _tensors(x, out, depth - 1)
    elif depth > 0 and isinstance(obj, Mapping):
        for x in obj.values():
            _tensors(x, out, depth - 1)


class StateSnapshot:
    """Copies of the tensors a case run writes (pools, tensor args, a module's buffers), restorable in place."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        seen: set[int] = set()
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        for t in tensors:
            if id(t) in seen or t.is_meta:
                continue
            seen.add(id(t))
            self.saved.append((t, t.detach().clone()))
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore(self) -> None:
        for t, saved in self.saved:
            ctx = torch.inference_mode() if t.is_inference() else torch.no_grad()
            with ctx:
                t.copy_(saved)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)


@dataclass
class EagerReference:
    """The named pools after an eager run of the case, and which op wrote each row."""

    before: dict[str, torch.Tensor]
    after: dict[str, torch.Tensor]
    # pool -> row -> the last op that changed it in the eager run
    writers: dict[str, dict[int, str]]
    notes: list[str] = field(default_factory=list)

    def compare(self, pools: Mapping[str, torch.Tensor]) -> list[WriteFinding]:
        """A ``lost_write`` per pool whose rows the compiled run left different from eager."""
        found = []
        for name, eager_after in self.after.items():
            if name not in pools:
                self.notes.append(f"pool {name!r} is gone after the compiled run: not compared")
                continue
            now = pools[name].detach()
            before = self.before[name]
            if now.numel() == 0:
                continue
            diff = _differs(now, eager_after)
            rows = rows_view(diff).any(dim=1).nonzero().flatten().tolist()
            if not rows:
                continue
            unwritten = [r for r in rows if not _row_changed(now, before, r)]
            extra = [r for r in rows if not _row_changed(eager_after, before, r)]
            writers = sorted({self.writers.get(name, {}).get(r, "?") for r in rows} - {"?"})
            by = ", ".join(writers) or "an op the check did not see"
            nbytes = len(rows) * row_bytes(now)
            parts = [f"{len(unwritten)} never written by the compiled run"] if unwritten else []
            parts += [f"{len(extra)} written only by the compiled run"] if extra else []
            what = "; ".join(parts) or "written differently"
            found.append(
                WriteFinding(
                    WriteProblem.LOST_WRITE,
                    name,
                    by,
                    rows=tuple(rows),
                    nbytes=nbytes,
                    details={"unwritten_rows": unwritten, "compiled_only_rows": extra, "eager_writers": writers},
                    message=f"pool {name!r}: rows {fmt_rows(rows)} differ from the eager run after the compiled run "
                    f"({what}; {nbytes} bytes); eager wrote them with {by}",
                )
            )
        return found


def _row_changed(a: torch.Tensor, before: torch.Tensor, r: int) -> bool:
    return bool(changed_rows(before[r : r + 1], a[r : r + 1]))


def _differs(now: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    if not (now.is_floating_point() or now.is_complex()):
        return now != ref
    scale = max(1.0, float(ref.abs().nan_to_num(0.0, 0.0, 0.0).max()))
    tol = ROW_TOLERANCE.get(now.dtype, 0.0) * scale
    d = (now.to(torch.float64) - ref.to(torch.float64)).abs() > tol
    return (d | (now.isnan() != ref.isnan())) & ~(now.isnan() & ref.isnan())


def eager_reference(
    pools: Mapping[str, torch.Tensor], state: list[torch.Tensor], run: Callable[[], Any]
) -> EagerReference:
    """Run ``run()`` (the case, eagerly) and restore everything it wrote; the pools after, and their writers.

    ``state``: every tensor the run may write (the pools, tensor args, a module's buffers); it is
    snapshotted with the RNG state first and restored in place after, so the compiled run starts
    from the same state.
    """
    pools = dict(pools)
    snapshot = StateSnapshot([*pools.values(), *state])
    before = {n: t.detach().clone() for n, t in pools.items()}
    watcher = WriteWatcher(pools, declared=True)
    try:
        with watcher:
            run()
        after = {n: t.detach().clone() for n, t in pools.items()}
    finally:
        snapshot.restore()
    writers: dict[str, dict[int, str]] = {}
    for w in watcher.writes:
        rows = writers.setdefault(w.pool, {})
        for r in w.rows:
            rows[r] = w.op
    return EagerReference(before, after, writers)


def tensors_in(*objs: Any) -> list[torch.Tensor]:
    """The tensors in (nested tuples, lists, mappings of) ``objs``; a module's buffers."""
    out: list[torch.Tensor] = []
    for obj in objs:
        if isinstance(obj, torch.nn.Module):
            out += list(obj.buffers())
        else:
            _tensors(obj, out)
    return out


__all__ = ["ROW_TOLERANCE", "EagerReference", "StateSnapshot", "eager_reference", "tensors_in"]
