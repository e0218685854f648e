"""Pools a compiled region replaces instead of writing: the out-of-place update rebound every step.

``self.keys = self.keys.index_copy(2, pos, k)`` (the classic StaticCache regression) compiles to a graph
that returns a fresh cache-sized tensor, which Dynamo's resumed bytecode binds to ``self.keys`` after
the graph ran: the generated code copies the whole cache into a new buffer on every call, and there
is no ``copy_`` epilogue for the graph analysis to find. What does show is the pool's identity: re-read
through ``pools=callable`` (``lambda: pools_from_module(model, ...)``) before each region call and once
when the session ends, the named pool is another tensor than before the last call, and its storage is
one that call returned. Each such pool is a ``pool_replaced`` copy of its bytes per call. A pool rebuilt
outside every region (an engine reallocating its cache between steps) is another tensor too, but none
a region returned: it is followed, as before, not reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from compile_checks.check.findings import SurvivingClone
from compile_checks.check.graph.fx_helpers import layer_of
from compile_checks.check.storage_identity import storage_key
from compile_checks.vocab import CopyKind


def output_storages(out: Any) -> dict[int, int]:
    """Storage key (:func:`~compile_checks.check.storage_identity.storage_key`) -> position of every
    tensor a region call returned (a tuple or list of outputs)."""
    items = out if isinstance(out, (list, tuple)) else (out,)
    return {storage_key(t): i for i, t in enumerate(items) if isinstance(t, torch.Tensor)}


@dataclass
class Replacement:
    """A named pool one region replaced: its size, and on how many calls."""

    pool: str
    region: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    op: str
    output: int
    calls: int = 0


@dataclass
class PoolIdentityWatch:
    """Which named pools came back from a region call as another tensor (see the module docstring)."""

    replacements: dict[tuple[str, int], Replacement] = field(default_factory=dict)
    # the last region call: (region index, its outputs' storage key -> position, each output's producing op)
    _last: tuple[int, dict[int, int], Sequence[str]] | None = None

    def region_returned(self, region: int, out: Any, output_ops: Sequence[str] = ()) -> None:
        """Remember what the region call that just ran returned (the next comparison attributes to it)."""
        self._last = (region, output_storages(out), output_ops)

    def compare(self, before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> None:
        """The pools as read before the last region call against the pools read now."""
        if self._last is None:
            return
        region, storages, ops = self._last
        for name, new in after.items():
            old = before.get(name)
            if old is None or new is old:
                continue
            ptr = storage_key(new)
            if ptr == storage_key(old) or ptr not in storages:
                continue  # the same memory under a new view, or rebuilt outside the region: followed, not a copy
            position = storages[ptr]
            key = (name, region)
            if key not in self.replacements:
                op = ops[position] if position < len(ops) else "an out-of-place op"
                nbytes = new.numel() * new.element_size()
                self.replacements[key] = Replacement(name, region, nbytes, tuple(new.shape), new.dtype, op, position)
            self.replacements[key].calls += 1

    def clones(self) -> list[SurvivingClone]:
        """One ``pool_replaced`` copy per (pool, region): the new tensor's bytes, per call that replaced it."""
        return [
            SurvivingClone(
                op=r.op,
                arg=f"output {r.output}",
                nbytes=r.nbytes,
                shape=r.shape,
                dtype=r.dtype,
                pool=r.pool,
                layer=layer_of(r.pool),
                region=r.region,
                node=f"output {r.output}",
                kind=CopyKind.POOL_REPLACED,
                calls=r.calls,
            )
            for r in self.replacements.values()
        ]

    def notes(self, region_calls: Mapping[int, int]) -> list[str]:
        """How often each replacement happened, against the region's calls."""
        return [
            f"region {r.region}: pool {r.pool!r} was replaced by output {r.output} of the region ({r.op}) on "
            f"{r.calls} of its {region_calls.get(r.region, 0)} call(s) ({r.nbytes} bytes each)"
            for r in self.replacements.values()
        ]


def output_ops(graph: Any) -> list[str]:
    """``namespace::op`` producing each output of a post-grad graph (what a replaced pool was made by)."""
    from compile_checks.check.graph.fx_helpers import op_name

    out_node = next((n for n in reversed(graph.nodes) if n.op == "output"), None)
    if out_node is None or not out_node.args:
        return []
    values = out_node.args[0] if isinstance(out_node.args[0], (list, tuple)) else (out_node.args[0],)
    return [op_name(v.target) if isinstance(v, torch.fx.Node) and v.op == "call_function" else "" for v in values]


__all__ = ["PoolIdentityWatch", "Replacement", "output_ops", "output_storages"]
