"""Which named pools an opaque op call can reach: what the write watcher checksums around it.

Apart because the narrowing rule (and the registry of ops that reach the cache through global
state) is a policy of its own, shared by every watcher of one check session.

An opaque op call reaches:

* the pools that share storage with any of its tensor arguments (a view of one layer's cache
  reaches everything in that allocation);
* every pool, when the op is known to reach the cache through global state: vLLM's KV-update and
  attention ops (they take the cache from the forward context), and every op or ``namespace::*``
  pattern given to :func:`register_global_state_ops` (an engine's own forward-context op);
* every pool, on the first call of each op in a session (a *sweep*): an op seen writing a pool it
  was not handed is learned as reaching global state and is watched in full from then on. An op
  that writes a pool it is not handed only on a later call is missed unless registered
  (:func:`register_global_state_ops`) or watched in full (``WriteReach(watch_all=True)``: every pool
  around every opaque call, as the check did before it narrowed).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from compile_checks.check.runtime_pools import PoolIndex
from compile_checks.check.writes.ops import VLLM_ATTENTION_OPS, VLLM_KV_UPDATE_OPS

# ops (or ``namespace::*`` patterns) that reach the cache through global state: every pool is watched
_GLOBAL_STATE_OPS: set[str] = set(VLLM_KV_UPDATE_OPS | VLLM_ATTENTION_OPS)


def register_global_state_ops(*names: str) -> None:
    """Watch every named pool around every call of these ops (``"ns::op"`` or a pattern, ``"ns::*"``).

    For an engine op that reaches its cache through global state (a forward context, a module-level
    dict) and may write it only on some calls; process-wide, like the op registration itself.
    """
    for name in names:
        if not isinstance(name, str) or "::" not in name:
            raise ValueError(f"an op is named 'namespace::name' (or 'namespace::*'), got {name!r}")
        _GLOBAL_STATE_OPS.add(name)


def global_state_ops() -> frozenset[str]:
    """The registered ops and patterns (vLLM's KV-update and attention ops included)."""
    return frozenset(_GLOBAL_STATE_OPS)


def reaches_global_state(op: str, extra: Iterable[str] = ()) -> bool:
    base = op.split(".", 1)[0]  # "ns::name.overload" -> "ns::name"
    return any(fnmatch.fnmatchcase(base, pattern) for pattern in (*_GLOBAL_STATE_OPS, *extra))


def _tensors(value: Any, out: list[torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out)


class WriteReach:
    """The narrowing policy and what it learned in one session (shared by the session's watchers).

    ``global_state_ops``: extra ops / patterns reaching global state, for this session only;
    ``sweep``: watch every pool on each op's first call and learn the ops that wrote a pool they were
    not handed; ``watch_all``: every pool around every opaque call (no narrowing).
    """

    def __init__(self, global_state_ops: Iterable[str] = (), *, sweep: bool = True, watch_all: bool = False) -> None:
        self.extra = frozenset(global_state_ops)
        self.sweep = sweep
        self.watch_all = watch_all
        self.swept: set[str] = set()  # ops whose first call was watched in full
        self.learned: set[str] = set()  # ops seen writing a pool none of their arguments shares storage with
        self._global: dict[str, bool] = {}

    def is_global(self, op: str) -> bool:
        hit = self._global.get(op)
        if hit is None:
            hit = self._global[op] = reaches_global_state(op, self.extra)
        return hit or op in self.learned

    def pools_for(self, op: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], index: PoolIndex) -> set[str]:
        """The pools one call of ``op`` can reach (all of them: global state, a sweep, ``watch_all``)."""
        if self.watch_all or self.is_global(op):
            return set(index.refs)
        if self.sweep and op not in self.swept:
            self.swept.add(op)
            return set(index.refs)
        return self.handed(args, kwargs, index)

    @staticmethod
    def handed(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: PoolIndex) -> set[str]:
        """The pools sharing storage with a tensor argument of the call."""
        tensors: list[torch.Tensor] = []
        _tensors(args, tensors)
        _tensors(tuple(kwargs.values()), tensors)
        out: set[str] = set()
        for t in tensors:
            if t.is_meta or t.layout != torch.strided:
                continue
            out.update(index.by_ptr.get(t.untyped_storage().data_ptr(), {}))
        return out

    def learn(self, op: str, pool: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], index: PoolIndex) -> None:
        """``op`` wrote ``pool``: when no argument shares its storage, the op reaches global state."""
        if pool not in self.handed(args, kwargs, index):
            self.learned.add(op)


__all__ = ["WriteReach", "global_state_ops", "reaches_global_state", "register_global_state_ops"]
