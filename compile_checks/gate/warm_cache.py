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
the reverse, when every graph was served) fail the case with a
:attr:`~compile_checks.vocab.CacheProblem.CACHE_DIVERGENCE` finding naming ``DIR`` and the bytes per
call. An empty or missing ``DIR`` serves nothing: the outcome is the cold one, with a note.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_checks.vocab import CacheProblem

if TYPE_CHECKING:
    from compile_checks.gate.outcome import Outcome
    from compile_checks.gate.plan import PlannedCase

WARM_RUN_MODULE = "compile_checks.scan.warm_run"
WARM_RUN_TIMEOUT_S = 600.0
GUIDE = "clear that cache, or give each layout its own cache dir (docs: guides/warm-cache.md)"


def _sizes(copies: Iterable[Mapping[str, Any]]) -> Counter[int]:
    return Counter(int(c["nbytes"]) for c in copies if isinstance(c.get("nbytes"), int))


def divergence(cold: Sequence[Mapping[str, Any]], warm: Mapping[str, Any], cache_dir: str) -> str | None:
    """The finding when the served artifacts copy other bytes per call than the cold verdict's copies.

    ``cold``: the cold outcome's copies (``verdict.copy_fields``); ``warm``: :func:`warm_run`'s result.
    Copies are matched by size. Bytes the cold compile copies and the served artifacts do not count only
    when every graph was served (a graph the caches did not serve ran eagerly, and copies nothing).
    """
    graphs = warm.get("graphs", [])
    if not graphs:
        return None
    warm_copies = [c for g in graphs for c in g["copies"]]
    cold_sizes, warm_sizes = _sizes(cold), _sizes(warm_copies)
    extra = warm_sizes - cold_sizes
    missing = cold_sizes - warm_sizes if not warm.get("missed") else Counter()
    if not extra and not missing:
        return None
    served = sorted({s for g in graphs for s in g["served_from"]})
    parts = []
    if extra:
        what = "; ".join(
            f"{g['label']}: {c['op']} {c['arg']} of {c['input']} into a {c.get('shape', '?')} {c.get('dtype', '')} "
            f"buffer ({c['nbytes']} bytes)"
            for g in graphs
            for c in g["copies"]
            if isinstance(c["nbytes"], int) and c["nbytes"] in extra
        )
        parts.append(
            f"copies {sum(n * k for n, k in extra.items())} bytes per call that a cold compile does not ({what})"
        )
    if missing:
        parts.append(f"lacks {sum(n * k for n, k in missing.items())} bytes per call of copies a cold compile makes")
    origin = [n.removeprefix("cache_origin: ") for g in graphs for n in g["notes"] if n.startswith("cache_origin: ")]
    why = f"; {'; '.join(origin)}" if origin else ""
    return (
        f"{CacheProblem.CACHE_DIVERGENCE}: the artifact served from the Inductor cache {cache_dir} "
        f"({', '.join(served)}) {' and '.join(parts)}{why}; {GUIDE}"
    )


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
        folder = Path(cache_dir)
        if not folder.is_dir() or not any(folder.iterdir()):
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
    if finding is not None:  # a failing finding, as a run finding is (the table's verdict cell names its kind)
        outcome.check_errors.append(finding)
        message = finding.removeprefix(f"{CacheProblem.CACHE_DIVERGENCE}: ")
        entry = {"kind": str(CacheProblem.CACHE_DIVERGENCE), "message": message, "fails": True}
        outcome.report.setdefault("run_findings", []).append(entry)


__all__ = ["GUIDE", "WARM_RUN_MODULE", "check_warm_caches", "divergence", "run_warm"]
