"""Finders, registered the way vLLM's ``PostGradPassManager`` holds its passes: a new finder is one module
with one :func:`register_finder` line. A finder reads one source (a region's graphs, the run, a trace) and
returns :class:`~compile_checks.findings.record.Finding` records; it never decides the verdict."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from compile_checks.findings.record import Finding
from compile_checks.vocab import FinderSource


@dataclass(frozen=True)
class Finder:
    name: str
    source: FinderSource
    find: Callable[[Any], Iterable[Finding]]


_FINDERS: dict[str, Finder] = {}


def register_finder(
    name: str, source: FinderSource
) -> Callable[[Callable[[Any], Iterable[Finding]]], Callable[[Any], Iterable[Finding]]]:
    """Decorator: ``@register_finder("lost_writes", FinderSource.RUN)`` over ``def find(report) -> [Finding]``."""

    def wrap(fn: Callable[[Any], Iterable[Finding]]) -> Callable[[Any], Iterable[Finding]]:
        if name in _FINDERS:
            raise ValueError(f"finder {name!r} is registered twice")
        _FINDERS[name] = Finder(name, source, fn)
        return fn

    return wrap


def finders(source: FinderSource | None = None) -> list[Finder]:
    """The registered finders (of one source), in registration order."""
    return [f for f in _FINDERS.values() if source is None or f.source == source]


_ORDER = (FinderSource.GRAPH, FinderSource.RUN, FinderSource.TRACE)


def run_finders(evidence: Any) -> list[Finding]:
    """What every registered finder finds in ``evidence``, graph finders first, each in registration order.
    A finder that raises is a bug of the check: it propagates (no finding is silently dropped)."""
    return [f for source in _ORDER for finder in finders(source) for f in finder.find(evidence)]


__all__ = ["Finder", "finders", "register_finder", "run_finders"]
