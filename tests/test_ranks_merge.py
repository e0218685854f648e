"""Merging the ranks' results: one verdict, copies keyed by rank, ranks that differ said so, a dead rank an error.

Plain data, no processes: the ranks' results as the worker writes them, judged by the merge.
"""

from __future__ import annotations

from typing import Any

from compile_checks.gate.outcome import outcome_from_ranked
from compile_checks.gate.plan import CaseSource, PlannedCase
from compile_checks.ranks import RankedCase, RankedResult
from compile_checks.ranks.launcher import RankRun
from compile_checks.vocab import ErrorKind, Pipeline

COPY = {
    "op": "ar_paging::paged_write",
    "arg": "v_pool",
    "pool": "layer0.v",
    "nbytes": 3072,
    "kind": "functionalization_clone",
    "written_bytes": 1536,
    "where": "region 0 node clone_default",
    "explanation": None,
    "shape": [768],
    "dtype": "float32",
    "region": 0,
    "node": "clone_default",
}


def factory(rank: int, world_size: int) -> None:
    return None


def rank_result(rank: int, copies: int, problems: tuple[str, ...] = (), eager: bool | None = True) -> dict[str, Any]:
    return {
        "rank": rank,
        "case": f"c@rank{rank}",
        "clean": copies == 0,
        "problems": list(problems),
        "clones": [COPY] * copies,
        "other_clones": [],
        "clone_bytes": 3072 * copies,
        "clone_bytes_per_run": 6144 * copies,
        "eager_match": eager,
        "max_abs_diff": 0.0,
        "analysis_only": True,
        "compile_seconds": 1.0,
        "wall_seconds": 2.0,
        "notes": [],
        "report": {},
    }


def merged(*copies: int, expect: tuple[bool, ...] | None = None, runs: list[RankRun] | None = None) -> RankedResult:
    ranked = RankedCase("c", factory, world_size=len(copies) or len(runs or []), expect_clean_by_rank=expect)
    runs = runs or [RankRun(r, 0, 3.0, "", rank_result(r, n)) for r, n in enumerate(copies)]
    return RankedResult(ranked, "gloo", runs, 5.0, True)


def test_every_rank_clean_is_one_clean_verdict() -> None:
    result = merged(0, 0)
    assert result.clean is True and result.passed and result.verdict == "clean on 2 ranks"
    assert not result.differences and not result.copies()


def test_copies_are_keyed_by_rank() -> None:
    result = merged(2, 2, expect=(False, False))
    assert result.passed and not result.differences
    assert result.verdict == "2 ranks, each 2 clone(s) layer0.v 6144 B/call"  # the pools, as the gate table names them
    assert [c["rank"] for c in result.copies()] == [0, 0, 1, 1]
    assert result.to_dict()["clone_bytes_per_run"] == 2 * 12288


def test_only_rank_1_cloning_is_reported_as_ranks_that_differ() -> None:
    expected = merged(0, 2, expect=(True, False))
    assert expected.passed and expected.rank_failures == []
    assert expected.verdict == "ranks differ: rank 0 clean; rank 1 2 clone(s) layer0.v 6144 B/call"
    # negative control: the same runs judged as "every rank clean" fail, naming rank 1 only
    every_clean = merged(0, 2)
    assert not every_clean.passed and every_clean.clean is False
    assert len(every_clean.rank_failures) == 1 and every_clean.rank_failures[0].startswith("rank 1: 2 pool clone(s)")
    # and a negative control on every rank where rank 0 stopped cloning names rank 0
    every_clones = merged(0, 2, expect=(False, False))
    assert not every_clones.passed
    assert [f.split(":")[0] for f in every_clones.rank_failures] == ["rank 0"]
    assert "stopped cloning" in every_clones.rank_failures[0]


def test_a_rank_without_a_verdict_is_an_error_never_clean() -> None:
    runs = [
        RankRun(0, 0, 3.0, "", rank_result(0, 0)),
        RankRun(1, -9, 2.0, "Traceback ...\nKilled", None),
    ]
    result = merged(runs=runs)
    assert result.clean is None and not result.passed
    assert result.errors == [
        "rank 1 died with exit code -9 before writing its result; its log ends:\nTraceback ...\nKilled"
    ]
    assert result.verdict.startswith("ERROR: rank 1 died with exit code -9")


def test_the_gate_outcome_of_a_ranked_case() -> None:
    source = CaseSource("target", "cases.py:cases")
    planned = PlannedCase(source, "c", "c", Pipeline.STOCK, False, True)
    outcome = outcome_from_ranked(planned, merged(0, 2, expect=(True, False)))
    assert outcome.passed and outcome.report["differences"] and outcome.clean is False
    assert {c["rank"] for c in outcome.clones} == {1}
    failing = outcome_from_ranked(planned, merged(2, 2, expect=(True, False)))
    assert not failing.passed and failing.failure_reasons()[0].startswith("rank 0: 2 pool clone(s)")
    mismatch = merged(0, 0)
    mismatch.runs[1].result["eager_match"] = False  # type: ignore[index]
    assert not mismatch.passed and mismatch.eager_match is False
    dead = merged(runs=[RankRun(0, 0, 1.0, "", rank_result(0, 0)), RankRun(1, None, 9.0, "hang", None, "timeout")])
    errored = outcome_from_ranked(planned, dead)
    assert errored.error_kind == ErrorKind.COMPILE and "rank 1 timeout" in (errored.error or "")
