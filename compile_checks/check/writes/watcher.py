"""The dispatch mode that sees a pool written: :class:`WriteWatcher` diffs the named pools around op calls.

Apart because both write checks run under it: the compiled regions' runs (undeclared writes) and the
eager reference run (which op wrote each row, for lost-write messages). Version counters cannot do
this: under a dispatch mode the op's kernel is redispatched below ``ADInplaceOrView``, so an in-place
ATen op inside it bumps no ``_version``; the watcher compares bytes against a shadow copy instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from compile_checks.check.runtime_pools import PoolIndex
from compile_checks.check.writes.ops import declared_mutations, is_opaque, op_name
from compile_checks.check.writes.rows import changed_rows


@dataclass(frozen=True)
class ObservedWrite:
    """One op call that changed rows of a named pool."""

    op: str
    pool: str
    rows: tuple[int, ...]
    declared: bool  # the call declared a mutation of (a view of) this pool


class WriteWatcher(TorchDispatchMode):
    """Diff the named pools around op calls; see the module docstring.

    Around each opaque op: every pool it does not declare to write (an undeclared write).
    With ``declared=True`` also around each op that declares writing a pool: that pool (to name
    the op that wrote each row, for lost-write messages). Trusted (ATen) ops that declare no
    write are not diffed. The mode is off inside an op's kernel, so the outermost op is named.
    """

    # higher-order ops (auto_functionalized in a graph the post-grad hook never saw, invoke_subgraph ...)
    # run unwatched: what they call is not diffed (the copy check lists such graphs as unanalysed)
    supports_higher_order_operators = True

    def __init__(self, pools: Mapping[str, torch.Tensor], *, declared: bool = False) -> None:
        super().__init__()
        self.pools = dict(pools)
        self.index = PoolIndex(self.pools)
        self.declared = declared
        self.writes: list[ObservedWrite] = []
        self.opaque_calls: dict[str, int] = {}
        self._shadow: dict[str, torch.Tensor] = {}

    def _snapshot(self, name: str) -> torch.Tensor:
        pool = self.pools[name]
        shadow = self._shadow.get(name)
        if shadow is None:
            shadow = self._shadow[name] = torch.empty_like(pool)
        shadow.copy_(pool)
        return shadow

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not isinstance(func, torch._ops.OpOverload) or not self.pools:
            return func(*args, **kwargs)
        written = declared_mutations(func, args, kwargs)
        declared = {n for t in written for n in self.index.touched(t)}
        opaque = is_opaque(func)
        watch = set(declared) if self.declared else set()
        if opaque:
            self.opaque_calls[op_name(func)] = self.opaque_calls.get(op_name(func), 0) + 1
            watch |= set(self.pools) - declared
        if not watch:
            return func(*args, **kwargs)
        with torch.no_grad():
            before = {n: self._snapshot(n) for n in sorted(watch)}
        out = func(*args, **kwargs)
        name = op_name(func)
        for n, shadow in before.items():
            rows = changed_rows(shadow, self.pools[n])
            if rows:
                self.writes.append(ObservedWrite(name, n, tuple(rows), n in declared))
        return out


__all__ = ["ObservedWrite", "WriteWatcher"]
