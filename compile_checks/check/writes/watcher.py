"""The dispatch mode that sees a pool written: :class:`WriteWatcher` checksums pools around op calls.

Apart because both write checks run under it: the compiled regions' runs (undeclared writes) and the
eager reference run (which op wrote each row, for lost-write messages). Version counters cannot do
this: under a dispatch mode the op's kernel is redispatched below ``ADInplaceOrView``, so an in-place
ATen op inside it bumps no ``_version``; the watcher compares per-row checksums of the pool's bits
taken before and after the call instead (:mod:`.checksums`: O(rows) memory on the pool's device, no
copy of the pool). What it watches around an opaque call is narrowed to the pools the call can
reach (:mod:`.reach`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from compile_checks.check.runtime_pools import PoolIndex
from compile_checks.check.writes.checksums import changed_rows_of, row_checksums
from compile_checks.check.writes.ops import declared_mutations, is_opaque, op_name
from compile_checks.check.writes.reach import WriteReach


@dataclass(frozen=True)
class ObservedWrite:
    """One op call that changed rows of a named pool."""

    op: str
    pool: str
    rows: tuple[int, ...]
    declared: bool  # the call declared a mutation of (a view of) this pool


class WriteWatcher(TorchDispatchMode):
    """Checksum the pools an op call can reach, before and after it; see the module docstring.

    Around each opaque op: the pools it can reach (:class:`~.reach.WriteReach`: those sharing storage
    with its arguments, every pool for an op reaching global state or on an op's first call) that it
    does not declare to write (an undeclared write). With ``declared=True`` also around each op that
    declares writing a pool: that pool (to name the op that wrote each row, for lost-write messages).
    Trusted (ATen) ops that declare no write are not watched. The mode is off inside an op's kernel,
    so the outermost op is named. ``reach``: the session's policy (a fresh one per watcher by default).
    """

    # higher-order ops (auto_functionalized in a graph the post-grad hook never saw, invoke_subgraph ...)
    # run unwatched: what they call is not diffed (the copy check lists such graphs as unanalysed)
    supports_higher_order_operators = True

    def __init__(
        self, pools: Mapping[str, torch.Tensor], *, declared: bool = False, reach: WriteReach | None = None
    ) -> None:
        super().__init__()
        self.pools = dict(pools)
        self.index = PoolIndex(self.pools)
        self.declared = declared
        self.reach = reach if reach is not None else WriteReach()
        self.writes: list[ObservedWrite] = []
        self.opaque_calls: dict[str, int] = {}
        # pool -> calls that checksummed it (what the watch cost: each is one read of the pool, twice)
        self.watched: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not isinstance(func, torch._ops.OpOverload) or not self.pools:
            return func(*args, **kwargs)
        opaque = is_opaque(func)
        if not opaque and not self.declared:  # a trusted op: its declared writes are not this watch's business
            return func(*args, **kwargs)
        written = declared_mutations(func, args, kwargs)
        declared = {n for t in written for n in self.index.touched(t)}
        watch = set(declared) if self.declared else set()
        name = op_name(func) if opaque or watch else ""
        if opaque:
            self.opaque_calls[name] = self.opaque_calls.get(name, 0) + 1
            watch |= self.reach.pools_for(name, args, kwargs, self.index) - declared
        if not watch:
            return func(*args, **kwargs)
        with torch.no_grad():
            before = {n: row_checksums(self.pools[n]) for n in sorted(watch)}
        out = func(*args, **kwargs)
        with torch.no_grad():
            for n, sums in before.items():
                self.watched[n] = self.watched.get(n, 0) + 1
                rows = changed_rows_of(sums, row_checksums(self.pools[n]))
                if not rows:
                    continue
                self.writes.append(ObservedWrite(name, n, tuple(rows), n in declared))
                if opaque and n not in declared:
                    self.reach.learn(name, n, args, kwargs, self.index)
        return out


__all__ = ["ObservedWrite", "WriteWatcher"]
