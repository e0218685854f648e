"""The ranks' results merged into one verdict: copies keyed by rank, ranks that differ said so.

A rank that raised, died or hung has no verdict: the merged result is an error naming the rank
and the tail of its log, never clean. Each rank is judged against its own expectation (the
ranked case's, per rank); the merged case passes when every rank did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compile_checks.findings import Evidence, Verdict, verdict_of
from compile_checks.ranks.launcher import RankRun
from compile_checks.ranks.spec import RankedCase
from compile_checks.verdict import copy_names, failure_reasons


def rank_error(run: RankRun) -> str | None:
    """Why rank ``run.rank`` has no verdict (with its log tail), or None when it has one."""
    result = run.result
    if result is not None and "error" not in result and run.returncode == 0:
        return None
    if result is not None and "error" in result:
        why = f"raised {result['error']}"
    elif run.stopped_because is not None:
        why = run.stopped_because
    else:
        why = f"died with exit code {run.returncode} before writing its result"
    tail = run.log_tail.strip() or "(empty log)"
    return f"rank {run.rank} {why}; its log ends:\n{tail}"


def rank_verdict(result: dict[str, Any], *, expect_clean: bool) -> Verdict:
    """One rank's verdict against its own expectation (compiled == eager is merged over the ranks)."""
    evidence = Evidence(report=result["report"], copies=result["clones"], other_copies=result["other_clones"])
    return verdict_of(evidence, expect_clean=expect_clean)


def copies_summary(result: dict[str, Any]) -> str:
    """``clean``, or ``2 clone(s) v_pool 24576 B/call``: one rank's verdict in the gate table's words."""
    copies = [*result["clones"], *result["other_clones"]]
    if not copies:
        return "clean"
    return f"{len(copies)} clone(s) {copy_names(copies)} {sum(c['nbytes'] for c in copies)} B/call"


def _signature(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    copies = [*result["clones"], *result["other_clones"]]
    return sorted((c["op"], c["arg"], str(c["pool"]), c["kind"], c["nbytes"]) for c in copies)


@dataclass
class RankedResult:
    """What every rank of a :class:`RankedCase` came to, merged."""

    ranked: RankedCase
    backend: str
    runs: list[RankRun]
    wall_seconds: float
    analysis_only: bool

    @property
    def errors(self) -> list[str]:
        """One line (and log tail) per rank that reached no verdict; the rank that ended first leads (the cause,
        usually: its peers then fail in a collective, or are stopped)."""
        return [e for e in map(rank_error, sorted(self.runs, key=lambda r: r.seconds)) if e is not None]

    @property
    def results(self) -> dict[int, dict[str, Any]]:
        """rank -> its result (:func:`compile_checks.ranks.worker.rank_result`), for the ranks that have one."""
        return {r.rank: r.result for r in self.runs if rank_error(r) is None and r.result is not None}

    @property
    def clean(self) -> bool | None:
        """No rank kept a copy; None when some rank reached no verdict."""
        if self.errors:
            return None
        return all(r["clean"] for r in self.results.values())

    @property
    def differences(self) -> list[str]:
        """How the ranks' copies differ (one rank clones, another not; other pools or bytes); empty when alike."""
        results = self.results
        if len(results) < 2 or len({repr(_signature(r)) for r in results.values()}) == 1:
            return []
        per_rank = "; ".join(f"rank {k} {copies_summary(r)}" for k, r in sorted(results.items()))
        return [f"ranks differ: {per_rank}"]

    @property
    def passed(self) -> bool:
        """Every rank ran and met its own expectation, and matched eager where it checks."""
        return not self.errors and not self.rank_failures and self.eager_match is not False

    @property
    def rank_failures(self) -> list[str]:
        """Why each rank that ran missed its own expected verdict, ``rank N: ...`` (compiled == eager aside)."""
        return [
            f"rank {k}: {why}"
            for k, r in sorted(self.results.items())
            for why in failure_reasons(
                rank_verdict(r, expect_clean=self.ranked.expectation(k)),
                copies=[*r["clones"], *r["other_clones"]],
                copies_listed=True,
            )
        ]

    @property
    def verdict(self) -> str:
        """One line: ``clean on 2 ranks``, ``2 ranks, each 2 clone(s) ...``, or ``ranks differ: ...``."""
        if self.errors:
            return "ERROR: " + "; ".join(e.splitlines()[0] for e in self.errors)
        if self.differences:
            return self.differences[0]
        n = len(self.results)
        first = self.results[0]
        return f"clean on {n} ranks" if first["clean"] else f"{n} ranks, each {copies_summary(first)}"

    @property
    def eager_match(self) -> bool | None:
        """Every rank's compiled run matched its eager reference; None when no rank checks it."""
        matches = [r["eager_match"] for r in self.results.values() if r["eager_match"] is not None]
        return all(matches) if matches else None

    def copies(self) -> list[dict[str, Any]]:
        """Every rank's copies (``verdict.copy_fields`` plus ``rank``), rank by rank."""
        return [{**c, "rank": k} for k, r in sorted(self.results.items()) for c in r["clones"]]

    def other_copies(self) -> list[dict[str, Any]]:
        return [{**c, "rank": k} for k, r in sorted(self.results.items()) for c in r["other_clones"]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "world_size": self.ranked.world_size,
            "backend": self.backend,
            "verdict": self.verdict,
            "clean": self.clean,
            "passed": self.passed,
            "errors": self.errors,
            "differences": self.differences,
            "rank_failures": self.rank_failures,
            "expect_clean_by_rank": [self.ranked.expectation(r) for r in range(self.ranked.world_size)],
            "clone_bytes_per_run": sum(r["clone_bytes_per_run"] for r in self.results.values()),
            "rank_seconds": {str(r.rank): round(r.seconds, 2) for r in self.runs},
            # every rank's compiled functions, ``rank<N> <code>`` (the gate table's graphs column counts them all)
            "recompiles": {
                f"rank{k} {code}": entry
                for k, r in sorted(self.results.items())
                for code, entry in r["report"].get("recompiles", {}).items()
            },
            "ranks": {str(k): r for k, r in sorted(self.results.items())},
        }


__all__ = ["RankedResult", "copies_summary", "rank_error", "rank_verdict"]
