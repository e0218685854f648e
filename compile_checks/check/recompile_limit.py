"""Dynamo's recompile limit, hit: which function, how many blocks share its code, and the fix.

Apart from :mod:`.recompiles` (counting graphs and guard failures) because hitting the limit is a
failure of its own with its own advice. A per-block compile (``block.forward = torch.compile(
block.forward, fullgraph=True)`` for each block, vLLM-Omni's way) compiles one code object for every
block of a class; a block that specialises on something of its own (its layer index) is guarded
apart, so each block is one more graph of that code. Past ``torch._dynamo.config.recompile_limit``
(8 by default) dynamo raises ``FailOnRecompileLimitHit`` under ``fullgraph=True`` ("Hard failure due
to fullgraph=True") and otherwise silently runs the rest eagerly.

:func:`watching_recompile_limit` wraps dynamo's ``convert_frame.exceeds_recompile_limit`` (and its
recompile-reasons function, for the frame being compiled) for a session and records each hit;
:func:`limit_message` words it; :func:`limit_findings` makes each hit a failing finding
(``recompile_limit_hit``) and :func:`raised_by_limit` tells whether an error is dynamo's hard failure.

The fix names the limit the run needs, counted, not guessed: where dynamo would fall back to eager
(no ``fullgraph``), the check lets it compile past the limit (up to :data:`COUNT_CAP` graphs of one
function) and counts the graphs the run made, whatever made them (blocks guarded apart, token
counts, Python ints). The case still fails on the hit; the extra graphs are analysed as the ones the
engine compiles once the limit is raised. Under ``fullgraph=True`` (or ``fail_on_recompile_limit_hit``)
dynamo's hard failure is kept, and the count is the blocks of the class (or the limit + 1: at least).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from compile_checks.check.recompiles import RecompileFinding, code_key
from compile_checks.vocab import CompileProblem

_MODULE = "torch._dynamo.convert_frame"
_LIMIT_HOOK = "exceeds_recompile_limit"
_REASONS_HOOK = "get_and_maybe_log_recompilation_reasons"


@dataclass(frozen=True)
class LimitHit:
    """One compile dynamo refused: ``code`` had ``graphs`` graphs, ``limit_type`` = ``limit``."""

    code: str
    limit_type: str  # "recompile_limit" or "accumulated_recompile_limit"
    limit: int
    owner: str  # the class of the frame's ``self`` ("" for a plain function)
    blocks: int  # modules of that class in the frame's ``self``'s module tree (0: unknown)
    counting: bool = False  # the check let dynamo compile past the limit to count the graphs the run needs


@dataclass
class LimitLog:
    hits: list[LimitHit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # the frame dynamo is deciding about: (code key, a weak reference to its ``self``); set by the reasons hook
    current: tuple[str, Any] = ("", None)
    # per code key: compiles the check let through past the limit (to count the graphs the run needs)
    past_limit: dict[str, int] = field(default_factory=dict)
    # per code key: the count reached COUNT_CAP, dynamo refused the rest
    capped: set[str] = field(default_factory=set)


# the most graphs of one function the check lets dynamo compile past its limit, to count what the run needs
COUNT_CAP = 64


def _hard_failure() -> bool | None:
    """Whether dynamo raises at this hit (``fullgraph=True`` or ``fail_on_recompile_limit_hit``); None: unknown.

    ``one_graph`` is read from ``convert_frame._compile``'s frame, the caller of ``exceeds_recompile_limit``.
    """
    import torch._dynamo.config as dynamo_config

    if getattr(dynamo_config, "fail_on_recompile_limit_hit", False):
        return True
    caller = sys._getframe(2)  # exceeds() <- _compile
    one_graph = caller.f_locals.get("one_graph") if caller.f_code.co_name == "_compile" else None
    return None if one_graph is None else bool(one_graph)


def _blocks_like(block: Any) -> int:
    """Modules of ``block``'s class in the module tree it belongs to (its root's), 0 when it is no module.

    The tree's root is found through the garbage collector (one pass over the live modules: a module
    knows its children, not its parent); only run when the limit is hit.
    """
    import torch

    if not isinstance(block, torch.nn.Module):
        return 0
    parent: dict[int, torch.nn.Module] = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.nn.Module):  # type(): a dead weak proxy fails isinstance
            for child in obj.__dict__.get("_modules", {}).values():
                if child is not None:
                    parent.setdefault(id(child), obj)
    root, seen = block, {id(block)}
    while id(root) in parent and id(parent[id(root)]) not in seen:
        root = parent[id(root)]
        seen.add(id(root))
    return sum(type(m) is type(block) for m in root.modules())


def _limit_of(log: LimitLog, code: str) -> int:
    return next((h.limit for h in log.hits if h.code == code), 0)


def graphs_needed(log: LimitLog, hit: LimitHit) -> tuple[int, bool]:
    """(graphs of ``hit.code`` the run needs, whether that is exact); counted past the limit where dynamo
    fell back to eager, else the blocks of the class or the limit + 1 (at least)."""
    if hit.counting:
        counted = hit.limit + log.past_limit.get(hit.code, 0)
        return max(counted, hit.blocks), hit.code not in log.capped
    return max(hit.blocks, hit.limit + 1), hit.blocks > hit.limit


@contextlib.contextmanager
def watching_recompile_limit(log: LimitLog) -> Iterator[LimitLog]:
    """Record every compile dynamo refuses for the recompile limit while the context is open."""
    module = importlib.import_module(_MODULE)
    limit_fn = getattr(module, _LIMIT_HOOK, None)
    reasons_fn = getattr(module, _REASONS_HOOK, None)
    if limit_fn is None or reasons_fn is None:
        log.notes.append(f"{_MODULE}.{_LIMIT_HOOK} is missing in this torch: a recompile-limit hit is not explained")
        yield log
        return

    @functools.wraps(reasons_fn)
    def reasons(cache_entries: Any, frame: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(frame, "f_locals", {}).get("self")
        try:
            ref = weakref.ref(owner) if owner is not None else None
        except TypeError:  # an object without weak references: its class is still named, its blocks not counted
            ref = None
        log.current = (code_key(frame.f_code), ref)
        return reasons_fn(cache_entries, frame, *args, **kwargs)

    @functools.wraps(limit_fn)
    def exceeds(cache_size: Any, compile_id: Any) -> tuple[bool, str]:
        exceeded, limit_type = limit_fn(cache_size, compile_id)
        if not exceeded:
            return exceeded, limit_type
        import torch._dynamo.config as dynamo_config

        code, ref = log.current
        code = code or "<unknown code>"
        counting = limit_type == "recompile_limit" and _hard_failure() is False
        if code not in {h.code for h in log.hits}:
            owner = ref() if ref is not None else None
            limit = int(getattr(dynamo_config, limit_type, 0))
            name = type(owner).__qualname__ if owner is not None else ""
            log.hits.append(LimitHit(code, limit_type, limit, name, _blocks_like(owner), counting))
        if counting:
            if log.past_limit.get(code, 0) + _limit_of(log, code) < COUNT_CAP:
                log.past_limit[code] = log.past_limit.get(code, 0) + 1
                return False, ""  # compiled, and counted: the case fails on the hit all the same
            log.capped.add(code)
        return exceeded, limit_type

    with mock.patch.object(module, _REASONS_HOOK, reasons), mock.patch.object(module, _LIMIT_HOOK, exceeds):
        yield log


def limit_message(hit: LimitHit, *, raised: bool, needed: tuple[int, bool] | None = None) -> str:
    """What the hit means and the fix, naming the config, the function and the graphs the run needs.

    ``needed``: (graphs, exact) from :func:`graphs_needed`; None: the blocks of the class, or the limit + 1.
    """
    if raised:
        what = "dynamo raised FailOnRecompileLimitHit (fullgraph=True)"
    elif hit.counting:
        what = "outside the check dynamo runs every call past the limit eagerly, uncompiled"
    else:
        what = "dynamo runs every later call of it eagerly, uncompiled and unchecked"
    if hit.limit_type != "recompile_limit":
        return (
            f"{hit.code} hit torch._dynamo.config.{hit.limit_type} ({hit.limit}): {what}; raise "
            f"torch._dynamo.config.{hit.limit_type}, or find why it recompiles (TORCH_LOGS=recompiles)"
        )
    need, exact = needed if needed is not None else (max(hit.blocks, hit.limit + 1), hit.blocks > hit.limit)
    who = f"blocks of class {hit.owner}" if hit.owner else "calls"
    if hit.counting:
        counted = (
            f"the run needed {need} graphs of it" if exact else f"the run needed more than {COUNT_CAP} graphs of it"
        )
        blocks = (
            f"{counted} (its calls guarded apart by their shapes, ints or blocks: TORCH_LOGS=recompiles says why; "
            "the check let dynamo compile past the limit to count them)"
        )
        if hit.owner and hit.blocks:
            blocks += f"; {hit.blocks} block{'s' if hit.blocks != 1 else ''} of class {hit.owner} share this code"
    elif hit.owner and hit.blocks > hit.limit:
        blocks = (
            f"{hit.blocks} blocks of class {hit.owner} share this code and dynamo guards each apart (one graph per "
            f"block), more than the limit"
        )
    else:
        blocks = (
            f"{hit.limit} graphs of it were compiled ({who} guarded apart: TORCH_LOGS=recompiles says why); at "
            f"least {need} are needed"
        )
    if not exact and hit.counting:
        advice = "find why it recompiles (TORCH_LOGS=recompiles) and mark the changing sizes dynamic"
    else:
        advice = (
            f"set torch._dynamo.config.recompile_limit = {need} before compiling, or compile each block with "
            f"torch.compile(..., recompile_limit={need}) or torch.compile(..., isolate_recompiles=True) (each "
            "block's compile keeps its own graphs)"
        )
    return (
        f"{hit.code} hit torch._dynamo.config.recompile_limit ({hit.limit}): {blocks}; {what}. A per-block compile "
        f"needs recompile_limit >= the graphs one code needs (its blocks of one class times the shapes each "
        f"sees): {advice}"
    )


def limit_findings(log: LimitLog, *, raised: bool = False) -> list[RecompileFinding]:
    """One failing ``recompile_limit_hit`` per function that hit the limit (its first hit)."""
    out: list[RecompileFinding] = []
    seen: set[str] = set()
    for hit in log.hits:
        if hit.code in seen:
            continue
        seen.add(hit.code)
        out.append(
            RecompileFinding(
                CompileProblem.RECOMPILE_LIMIT_HIT,
                hit.code,
                hit.limit,
                hit.limit,
                (),
                limit_message(hit, raised=raised, needed=graphs_needed(log, hit)),
            )
        )
    return out


def raised_by_limit(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) is dynamo's ``FailOnRecompileLimitHit``."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ == "FailOnRecompileLimitHit":
            return True
        exc = exc.__cause__ or exc.__context__
    return False


__all__ = [
    "COUNT_CAP",
    "LimitHit",
    "LimitLog",
    "graphs_needed",
    "limit_findings",
    "limit_message",
    "raised_by_limit",
    "watching_recompile_limit",
]
