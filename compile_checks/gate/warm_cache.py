"""``gate --inductor-cache DIR``: what a warm cache serves, beside the cold verdict.

The gate's verdict compiles with Inductor's caches off (a cache hit skips the passes the check
reads), but production runs with them on, and their keys leave out how a graph's inputs alias: an
engine that fixed its allocation (K and V separate) can keep loading the artifact compiled for the
old one (K and V views of one ``(2, ...)`` tensor), which copies the whole pool per call.

So, after the cold verdict, the case runs once more in a process of its own with
``TORCHINDUCTOR_CACHE_DIR=DIR`` (:mod:`compile_checks.scan.warm_run`: caches on, traced, nothing
compiled that the caches do not serve, ``DIR`` never written), and the scan reads what was loaded:
each served graph's post-grad graph and generated code (its ``empty_strided`` buffers settle the
copies, as in the full mode). Copies the served artifacts make that the cold verdict does not (or
the reverse, when every graph was served), or an artifact compiled for other input aliasing than the
case's, fail the case with a :attr:`~compile_checks.vocab.CacheProblem.CACHE_DIVERGENCE` finding naming
``DIR`` and the bytes per call. Copies are compared by op, argument and bytes per call (a symbolic
graph's at the sizes its calls had: :mod:`compile_checks.scan.call_sizes`), never counted: the cold
verdict lists one per pool a call passed. ``DIR`` must be a folder (else a usage error, exit 2); an
empty one serves nothing: the outcome is the cold one, with a note.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_checks.errors import UsageError
from compile_checks.vocab import CacheProblem

if TYPE_CHECKING:
    from compile_checks.gate.outcome import Outcome
    from compile_checks.gate.plan import PlannedCase

WARM_RUN_MODULE = "compile_checks.scan.warm_run"
WARM_RUN_TIMEOUT_S = 600.0
GUIDE = "clear that cache, or give each layout its own cache dir (docs: guides/warm-cache.md)"


def cache_dir_checked(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` resolved, when it is a directory; else a :class:`~compile_checks.errors.UsageError` naming it
    (the CLI's exit 2): a typo or a file must never read as an empty cache that serves nothing."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise UsageError(f"{what} {path}: no such directory (the Inductor cache folder to run the cases against)")
    if not folder.is_dir():
        raise UsageError(f"{what} {path}: not a directory (TORCHINDUCTOR_CACHE_DIR is a folder)")
    return folder.resolve()


Key = tuple[str, str]


def _key(c: Mapping[str, Any]) -> Key:
    return str(c.get("op")), str(c.get("arg"))


def _values(c: Mapping[str, Any]) -> set[int] | None:
    """The bytes per call a copy moves: its count, or its symbolic count at each recorded call's sizes
    (None: symbolic and never evaluated: it can neither match nor miss anything)."""
    n = c.get("nbytes")
    if isinstance(n, int):
        return {n}
    evaluated = c.get("nbytes_per_call")
    return {int(v) for v in evaluated} if evaluated else None


def _compare(
    cold: Sequence[Mapping[str, Any]], graphs: Sequence[Mapping[str, Any]], every_graph_served: bool
) -> tuple[list[tuple[str, Mapping[str, Any], set[int]]], dict[tuple[Key, int], Mapping[str, Any]]]:
    """(served copies whose bytes no cold copy of that op and argument moves, cold copies no served copy of that
    op and argument moves, by (key, bytes)).

    Copies are compared per (op, argument) and bytes per call, not counted: the cold verdict lists a copy per
    pool a call passed (one graph reused by four layers: four entries), a served graph lists it once. A cold
    copy that is an upper bound (analysis-only could not settle Inductor's buffer choice) is never lacked:
    the served generated code is what settles it (a served copy it matches is still no extra one)."""
    cold_bytes: dict[Key, set[int]] = {}
    for c in cold:
        if isinstance(c.get("nbytes"), int):
            cold_bytes.setdefault(_key(c), set()).add(int(c["nbytes"]))
    warm_bytes: dict[Key, set[int]] = {}
    unknown: set[Key] = set()
    extra: list[tuple[str, Mapping[str, Any], set[int]]] = []
    for g in graphs:
        for c in g["copies"]:
            values = _values(c)
            if values is None:
                unknown.add(_key(c))
                continue
            warm_bytes.setdefault(_key(c), set()).update(values)
            if not values & cold_bytes.get(_key(c), set()):
                extra.append((str(g["label"]), c, values))
    missing: dict[tuple[Key, int], Mapping[str, Any]] = {}
    if every_graph_served:  # a graph the caches did not serve ran eagerly: its copies are not the caches' to lack
        for c in cold:
            n = c.get("nbytes")
            if c.get("upper_bound"):  # the cold verdict could not settle it: the served code did, no claim to lack
                continue
            if isinstance(n, int) and _key(c) not in unknown and n not in warm_bytes.get(_key(c), set()):
                missing.setdefault((_key(c), n), c)
    return extra, missing


def divergence(cold: Sequence[Mapping[str, Any]], warm: Mapping[str, Any], cache_dir: str) -> str | None:
    """The finding when the served artifacts copy other bytes per call than the cold verdict's copies, or were
    compiled for other input aliasing than this run's (the artifact's code then addresses the wrong storage).

    ``cold``: the cold outcome's copies (``verdict.copy_fields``); ``warm``: :func:`warm_run`'s result.
    Bytes the cold compile copies and the served artifacts do not count only when every graph was served
    (a graph the caches did not serve ran eagerly, and copies nothing).
    """
    graphs = warm.get("graphs", [])
    if not graphs:
        return None
    extra, missing = _compare(cold, graphs, not warm.get("missed"))
    origin = [n.removeprefix("cache_origin: ") for g in graphs for n in g["notes"] if n.startswith("cache_origin: ")]
    if not extra and not missing and not origin:
        return None
    served = sorted({s for g in graphs for s in g["served_from"]})
    parts = []
    if extra:
        what = "; ".join(
            f"{label}: {c['op']} {c['arg']} of {c['input']} into a {c.get('shape', '?')} {c.get('dtype', '')} "
            f"buffer ({_bytes(c, values)} bytes)"
            for label, c, values in extra
        )
        total = sum(max(values) for _, _, values in extra)
        parts.append(f"copies {total} bytes per call that a cold compile does not ({what})")
    if missing:
        what = "; ".join(f"{op} {arg} ({n} bytes)" for (op, arg), n in missing)
        parts.append(f"lacks {sum(n for _, n in missing)} bytes per call of copies a cold compile makes ({what})")
    if not parts:
        parts.append("copies what a cold compile copies, but was compiled for other input aliasing")
    why = f"; {'; '.join(origin)}" if origin else ""
    return (
        f"{CacheProblem.CACHE_DIVERGENCE}: the artifact served from the Inductor cache {cache_dir} "
        f"({', '.join(served)}) {' and '.join(parts)}{why}; {GUIDE}"
    )


def _bytes(c: Mapping[str, Any], values: set[int]) -> str:
    n = c.get("nbytes")
    if isinstance(n, int):
        return str(n)
    return f"{n}: {', '.join(str(v) for v in sorted(values))} at the calls' sizes"


def run_warm(cases: Sequence[PlannedCase], cache_dir: Path) -> list[dict[str, Any]]:
    """:mod:`compile_checks.scan.warm_run` of ``cases`` in one fresh process reading ``cache_dir``."""
    with tempfile.TemporaryDirectory(prefix="compile-checks-warm-") as tmp:
        folder = Path(tmp)
        (folder / "planned.pickle").write_bytes(pickle.dumps(list(cases)))
        env = {k: v for k, v in os.environ.items() if k != "TORCH_TRACE"}  # its own trace goes to the folder below
        args = [str(folder / "planned.pickle"), str(folder / "out.json"), str(folder / "trace"), str(cache_dir)]
        done = subprocess.run(
            [sys.executable, "-m", WARM_RUN_MODULE, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=WARM_RUN_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0 or not (folder / "out.json").is_file():
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"the run against the cache exited {done.returncode}: {tail}")
        results: list[dict[str, Any]] = json.loads((folder / "out.json").read_text())
        return results


def check_warm_caches(cases: Sequence[PlannedCase], outcomes: Sequence[Outcome]) -> None:
    """Every outcome with an ``inductor_cache`` (and a cold verdict) run against it: one process per folder;
    what was served goes in ``report["inductor_cache"]``, a divergence in a ``cache_divergence`` finding."""
    by_dir: dict[str, list[int]] = {}
    for i, (planned, o) in enumerate(zip(cases, outcomes, strict=True)):
        if o.inductor_cache is not None and o.error is None and o.clean is not None:
            by_dir.setdefault(o.inductor_cache, []).append(i)
        elif planned.inductor_cache is not None and o.error is None:  # a ranked case: its ranks run elsewhere
            o.notes.append(f"--inductor-cache {planned.inductor_cache}: not run against the cache (a ranked case)")
    for cache_dir, indices in by_dir.items():
        folder = cache_dir_checked(cache_dir, f"inductor_cache of case {outcomes[indices[0]].label!r}:")
        if not any(folder.iterdir()):
            for i in indices:
                outcomes[i].report["inductor_cache"] = {"dir": cache_dir, "graphs": [], "missed": 0}
                outcomes[i].notes.append(f"--inductor-cache {folder}: empty, nothing served: the cold verdict stands")
            continue
        try:
            results = run_warm([cases[i] for i in indices], folder)
        except (RuntimeError, OSError, subprocess.TimeoutExpired, json.JSONDecodeError, pickle.PicklingError) as e:
            results = [{"error": str(e), "graphs": []} for _ in indices]
        for i, result in zip(indices, results, strict=True):
            _apply(outcomes[i], {"dir": cache_dir, "missed": 0, **result})


def _apply(outcome: Outcome, record: dict[str, Any]) -> None:
    outcome.report["inductor_cache"] = record
    folder = record["dir"]
    if record.get("error"):
        outcome.check_errors.append(f"{CacheProblem.CACHE_DIVERGENCE}: undecided against {folder}: {record['error']}")
        return
    outcome.notes.append(
        f"--inductor-cache {folder}: {len(record['graphs'])} graph(s) served from the cache, "
        f"{record['missed']} not served" + (f" ({record['skipped']})" if record.get("skipped") else "")
    )
    finding = divergence([*outcome.clones, *outcome.other_clones], record, folder)
    if finding is not None:  # a failing run finding (compile_checks.findings reads it from the report)
        message = finding.removeprefix(f"{CacheProblem.CACHE_DIVERGENCE}: ")
        entry = {"kind": str(CacheProblem.CACHE_DIVERGENCE), "message": message, "fails": True}
        outcome.report.setdefault("run_findings", []).append(entry)


__all__ = ["GUIDE", "WARM_RUN_MODULE", "cache_dir_checked", "check_warm_caches", "divergence", "run_warm"]
