"""Pools folded into constants: ``freezing=True`` makes a pool a region reads a compile-time constant.

With ``torch._inductor.config.freezing`` on (an inference compile), Inductor inlines every parameter and
buffer a region does not mutate as a constant (``_frozen_paramN``, ``torch._inductor.freezing``) and
constant-folds what reads it. A KV pool kept as a module buffer and only *read* in a region (the attention
region; another region, or the host loop, writes it) is such a buffer: the compiled code then reads the pool
as it was when the region compiled (a folded ``_frozen_param`` of the pool's shape), and from the next call on
its outputs use a stale snapshot. Nothing about it shows as a copy, and the outputs differ from eager only
when a ``verify`` compares them.

:func:`watching_frozen_pools` wraps ``freezing.replace_params_with_constants`` for a session: each
parameter it turns into a constant is matched to the named pools by storage (any view of a pool's
elements). Each pool so frozen is a failing :class:`FoldedPoolFinding` (``pool_folded``) naming the region,
the constant, the bytes and the fix. The pool counts as received by that region (it did reach it, as a
constant): the finding says what happened to it, not ``pool_not_received``. Cost: one storage lookup per
frozen parameter, at compile time.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch

from compile_checks.vocab import FindingKind

_MODULE = "torch._inductor.freezing"
_HOOK = "replace_params_with_constants"

FIX = (
    "fix: do not compile a region that reads a pool with freezing=True (drop it from the Inductor config), or "
    "pass the pool to the compiled function as an argument instead of keeping it as a module buffer or "
    "parameter (freezing inlines only those; a buffer the same region writes is kept too)"
)


@dataclass(frozen=True)
class _Frozen:
    """One (region, pool) freezing inlined, as logged."""

    pool: str
    region: int | None
    constant: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


@dataclass(frozen=True)
class FoldedPoolFinding(_Frozen):
    """A named pool that freezing turned into a constant of one compiled region: what was logged, worded."""

    message: str
    kind: FindingKind = FindingKind.POOL_FOLDED
    fails: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "pool": self.pool,
            "region": self.region,
            "constant": self.constant,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "nbytes": self.nbytes,
            "message": self.message,
            "fails": self.fails,
            "cause": "freezing=True inlined the pool as a constant of the region",
            "fix": FIX.removeprefix("fix: "),
        }


@dataclass
class FrozenPoolLog:
    """What freezing turned into constants during one session: each (region, pool) once."""

    frozen: list[_Frozen] = field(default_factory=list)

    def findings(self, label: Callable[[int], str] = lambda i: f"region {i}") -> list[FoldedPoolFinding]:
        out = []
        for f in self.frozen:
            where = label(f.region) if f.region is not None else "a compiled region"
            shape = list(f.shape)
            message = (
                f"{where}: pool {f.pool!r} was folded into the constant `{f.constant}` ({shape} {f.dtype}, "
                f"{f.nbytes} bytes) by freezing=True: Inductor treats it as never changing and bakes what the "
                "region reads of it into the compiled code, so from the next call on the region reads the pool as "
                f"it was when compiled, not as it is; {FIX}"
            )
            out.append(FoldedPoolFinding(**vars(f), message=message))
        return out


def _constant_name(gm: torch.fx.GraphModule, t: torch.Tensor) -> str:
    for name, buf in gm.named_buffers(recurse=False):
        if buf is t:
            return name
    return "_frozen_param"


@contextlib.contextmanager
def watching_frozen_pools(
    log: FrozenPoolLog, touched: Callable[[torch.Tensor], list[str]], region: Callable[[], int | None]
) -> Iterator[FrozenPoolLog]:
    """For the session: each parameter freezing inlines, matched to the named pools (``touched``: the pools
    a tensor shares elements with; ``region``: the index of the region compiling now) and logged in ``log``."""
    module = importlib.import_module(_MODULE)
    original = getattr(module, _HOOK)

    def replace_params_with_constants(gm: torch.fx.GraphModule, flat_params: list[Any], fw_metadata: Any) -> Any:
        preserved = original(gm, flat_params, fw_metadata)
        kept = set(preserved)
        index = region()
        for i, t in enumerate(flat_params):
            if i in kept or not isinstance(t, torch.Tensor) or t.is_meta:
                continue
            for name in touched(t):
                if any(f.pool == name and f.region == index for f in log.frozen):
                    continue
                nbytes = t.numel() * t.element_size()
                dtype = str(t.dtype).removeprefix("torch.")
                log.frozen.append(_Frozen(name, index, _constant_name(gm, t), tuple(t.shape), dtype, nbytes))
        return preserved

    with mock.patch.object(module, _HOOK, replace_params_with_constants):
        yield log


def frozen_pool_names(log: FrozenPoolLog) -> set[str]:
    """The named pools freezing made a constant of some region (they reached it, as constants)."""
    return {f.pool for f in log.frozen}


__all__ = ["FIX", "FoldedPoolFinding", "FrozenPoolLog", "frozen_pool_names", "watching_frozen_pools"]
