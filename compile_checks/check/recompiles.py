"""Recompiles: how many graphs dynamo compiled per function, and the guard failures that caused them.

A recompile costs a whole compile (seconds) and, past ``torch._dynamo.config.recompile_limit``,
dynamo silently runs the function eagerly. Both come from dynamo's own records:

* each compiled region is keyed by the code object dynamo was compiling when it called the
  backend (``TracingContext.get_traced_code()[0]``, the frame's own code) and its compile id
  (``frame_id/frame_compile_id``): :func:`current_frame`, called by the probe's backend;
* the guard failures that triggered each recompile are the list dynamo's
  ``convert_frame.get_and_maybe_log_recompilation_reasons`` returns (what
  ``TORCH_LOGS=recompiles`` prints); :func:`recording_reasons` wraps it for a session.

:func:`recompile_table` gives ``{code: {"graphs": n, "reasons": [...]}}``; :func:`recompile_findings`
turns ``max_recompiles`` into failures (a :class:`~compile_checks.vocab.CompileProblem`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import CodeType
from typing import Any
from unittest import mock

from compile_checks.vocab import CompileProblem

_REASONS_HOOK = ("torch._dynamo.convert_frame", "get_and_maybe_log_recompilation_reasons")


def code_key(code: CodeType) -> str:
    """``name (file.py:line)``: how a compiled function is named in the report."""
    return f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


def current_frame() -> tuple[str, str]:
    """(code key, compile id) of the frame dynamo is compiling now; ("", "") outside a dynamo compile."""
    from torch._guards import CompileContext, TracingContext

    traced = TracingContext.get_traced_code() or []
    compile_id = CompileContext.current_compile_id()
    return (code_key(traced[0]) if traced else "", str(compile_id) if compile_id is not None else "")


@dataclass
class RecompileLog:
    """Guard failures dynamo reported, per code key, in order (one entry per recompile attempt)."""

    reasons: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def compact_reason(reasons: Sequence[str]) -> str:
    """One line per failed guard, ``"0/1: tensor 'x' size mismatch ..."``, without dynamo's source comments."""
    lines = []
    for reason in reasons:
        for line in reason.splitlines():
            if re.match(r"^\s*\d+/\d+: ", line):
                lines.append(line.split("  #", 1)[0].strip())
    return "; ".join(lines) or "; ".join(r.strip() for r in reasons) or "unknown guard failure"


@contextlib.contextmanager
def recording_reasons(log: RecompileLog) -> Iterator[RecompileLog]:
    """Record every recompile's guard failures for the duration (dynamo's own reasons function, wrapped).

    A torch without that function still counts graphs; ``log.notes`` says the reasons are missing.
    """
    import importlib

    module = importlib.import_module(_REASONS_HOOK[0])
    original = getattr(module, _REASONS_HOOK[1], None)
    if original is None:
        log.notes.append(f"{'.'.join(_REASONS_HOOK)} is missing in this torch: recompile reasons are not recorded")
        yield log
        return

    @functools.wraps(original)
    def reasons(cache_entries: Any, frame: Any, *args: Any, **kwargs: Any) -> list[str]:
        got = original(cache_entries, frame, *args, **kwargs)
        if not kwargs.get("skip_logging", False):
            log.reasons.setdefault(code_key(frame.f_code), []).append(compact_reason(got))
        return got

    with mock.patch.object(module, _REASONS_HOOK[1], reasons):
        yield log


def recompile_table(regions: Sequence[Any], log: RecompileLog) -> dict[str, dict[str, Any]]:
    """``{code: {"graphs": n, "regions": [...], "compile_ids": [...], "reasons": [...]}}`` for every compiled code.

    ``graphs``: dynamo graphs compiled for that code (distinct compile ids: the pieces of one split
    graph, as the vllm-piecewise simulation compiles them, are one graph); ``regions``: the check's
    regions (pieces) they became; ``reasons``: one per recompile.
    A code with more recompile attempts than extra graphs hit dynamo's recompile limit (or a
    compile failed): the note says so.
    """
    table: dict[str, dict[str, Any]] = {}
    for r in regions:
        key = getattr(r, "code", "") or f"<unknown code: {r.compiled_fn_name}>"
        entry = table.setdefault(key, {"graphs": 0, "regions": [], "compile_ids": [], "reasons": []})
        compile_id = getattr(r, "compile_id", "") or f"region {r.index}"
        entry["regions"].append(r.index)
        if compile_id not in entry["compile_ids"]:
            entry["compile_ids"].append(compile_id)
            entry["graphs"] += 1
    for key, reasons in log.reasons.items():
        entry = table.setdefault(key, {"graphs": 0, "regions": [], "compile_ids": [], "reasons": []})
        entry["reasons"] = list(reasons)
        if len(reasons) > max(0, entry["graphs"] - 1):
            entry["note"] = (
                f"{len(reasons)} recompile(s) asked for, {max(0, entry['graphs'] - 1)} compiled: dynamo's "
                "recompile limit (or a failed compile) left the rest running eagerly"
            )
    return table


@dataclass(frozen=True)
class RecompileFinding:
    """A compiled function over ``max_recompiles``."""

    kind: CompileProblem
    code: str
    graphs: int
    limit: int
    reasons: tuple[str, ...]
    message: str
    fails: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "code": self.code,
            "graphs": self.graphs,
            "limit": self.limit,
            "reasons": list(self.reasons),
            "message": self.message,
            "fails": self.fails,
        }


def recompiles_of(entry: dict[str, Any]) -> int:
    """Recompiles of one code: extra graphs, or recompile attempts when the limit stopped them."""
    return max(entry["graphs"] - 1, len(entry.get("reasons", [])))


def recompile_findings(table: dict[str, dict[str, Any]], max_recompiles: int | None) -> list[RecompileFinding]:
    """One failure per compiled function recompiled more than ``max_recompiles`` times (None: no limit)."""
    if max_recompiles is None:
        return []
    out = []
    for code, entry in table.items():
        n = recompiles_of(entry)
        if n <= max_recompiles:
            continue
        shown = "; ".join(entry["reasons"][:5]) or "no guard failure recorded"
        out.append(
            RecompileFinding(
                CompileProblem.TOO_MANY_RECOMPILES,
                code,
                entry["graphs"],
                max_recompiles,
                tuple(entry["reasons"]),
                f"{code} was recompiled {n} time(s) ({entry['graphs']} graph(s)), more than max_recompiles="
                f"{max_recompiles}; guard failures: {shown}",
            )
        )
    return out


def total_graphs(table: dict[str, dict[str, Any]]) -> int:
    return sum(e["graphs"] for e in table.values())


def graphs_cell(table: dict[str, dict[str, Any]]) -> str:
    """The gate table's cell: graphs compiled, and the most recompiles of one function (``"4 (3 recompiles)"``)."""
    if not table:
        return "-"
    worst = max(recompiles_of(e) for e in table.values())
    return f"{total_graphs(table)}" + (f" ({worst} recompile{'s' if worst > 1 else ''})" if worst else "")


__all__ = [
    "RecompileFinding",
    "RecompileLog",
    "code_key",
    "current_frame",
    "graphs_cell",
    "recompile_findings",
    "recompile_table",
    "recompiles_of",
    "recording_reasons",
    "total_graphs",
]
