"""``gate --shard K/N`` and ``merge``: the shards of a run merge into the verdicts of one unsharded run."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from compile_checks.cli import main
from compile_checks.errors import UsageError
from compile_checks.gate.merge import merge_shards
from compile_checks.gate.outcome import Outcome
from compile_checks.gate.outputs import json_document
from compile_checks.gate.shard import Shard, assign
from compile_checks.vocab import Pipeline
from tests._cli_cases import write_engine

# ---- the split ------------------------------------------------------------------------------------


def test_shard_parse() -> None:
    assert Shard.parse("2/3") == Shard(2, 3)
    for bad in ("0/2", "3/2", "1", "a/b", "1/0", "-1/2"):
        with pytest.raises(UsageError, match="expected K/N"):
            Shard.parse(bad)


def test_without_timings_the_split_is_a_round_robin_in_plan_order() -> None:
    assert assign(list("abcde"), 2) == [0, 1, 0, 1, 0]
    assert assign(list("ab"), 3) == [0, 1]  # more shards than cases: the last shard holds none


def test_timings_balance_the_split_longest_first() -> None:
    labels = ["slow", "a", "b", "c", "medium"]
    timings = {"slow": 10.0, "a": 1.0, "b": 1.0, "c": 1.0, "medium": 8.0}
    shard_of = assign(labels, 2, timings)
    loads = [sum(timings[x] for x, k in zip(labels, shard_of) if k == s) for s in range(2)]
    assert shard_of[0] != shard_of[4] and sorted(loads) == [10.0, 11.0]
    assert assign(labels, 2, timings) == shard_of  # stable
    # a case the timings lack weighs the median of the known ones (1 s here, not the 10 s case's)
    assert assign(["new", "x", "y", "z"], 2, {"x": 10.0, "y": 1.0, "z": 1.0}) == [1, 0, 1, 1]


# ---- merge refuses what is not one complete run (no compile: shard documents written by hand) ------------


def _outcome(label: str, *, clean: bool, expect_clean: bool) -> Outcome:
    # the verdict is the findings': a case that is not clean has a copy
    copies = [] if clean else [{"op": "ar::w", "arg": "v", "pool": "layer0.v", "nbytes": 8, "kind": "aten_write_copy"}]
    return Outcome(
        label, "t.py:c/stock", Pipeline.STOCK, expect_clean, True, clean=clean, clones=copies, wall_seconds=1.0
    )


def _write_shards(tmp_path: Path, count: int, outcomes: list[Outcome], fingerprint: str = "f" * 16) -> list[Path]:
    labels = [o.label for o in outcomes]
    paths = []
    shard_of = assign(labels, count)
    for k in range(count):
        mine = [o for o, s in zip(outcomes, shard_of) if s == k]
        info = {"index": k + 1, "count": count, "plan_fingerprint": fingerprint, "plan_labels": labels}
        path = tmp_path / f"shard{k + 1}.json"
        path.write_text(json_document(mine, 0, 2.0 + k, [], extra={"shard": info}))
        paths.append(path)
    return paths


OUTCOMES = [
    _outcome("split", clean=True, expect_clean=True),
    _outcome("fused", clean=False, expect_clean=False),
    _outcome("regressed", clean=False, expect_clean=True),
]


def test_merge_restores_plan_order_and_the_exit_code(tmp_path: Path) -> None:
    run = merge_shards(_write_shards(tmp_path, 2, OUTCOMES))
    assert [o.label for o in run.outcomes] == ["split", "fused", "regressed"]
    assert [o.passed for o in run.outcomes] == [True, True, False]
    assert run.seconds == 3.0 and run.info["shard_seconds"] == {"1/2": 2.0, "2/2": 3.0}


def test_merge_refuses_a_missing_duplicated_or_foreign_shard(tmp_path: Path) -> None:
    one, two = _write_shards(tmp_path, 2, OUTCOMES)
    with pytest.raises(UsageError, match=r"missing shard\(s\) 2/2 of 2"):
        merge_shards([one])
    with pytest.raises(UsageError, match=r"duplicated shard\(s\): 1/2 in"):
        merge_shards([one, one, two])
    other = tmp_path / "other"
    other.mkdir()
    foreign = _write_shards(other, 2, OUTCOMES, fingerprint="0" * 16)[1]
    with pytest.raises(UsageError, match="different plans"):
        merge_shards([one, foreign])
    three = _write_shards(other, 3, OUTCOMES)[2]
    with pytest.raises(UsageError, match="different shard counts"):
        merge_shards([one, two, three])
    # shards that split the plan differently (different --shard-timings): a case in two shards
    doc = json.loads(two.read_text())
    doc["cases"].append(json.loads(one.read_text())["cases"][0])
    two.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="split the plan differently"):
        merge_shards([one, two])
    unsharded = tmp_path / "plain.json"
    unsharded.write_text(json_document(OUTCOMES, 1, 1.0, []))
    with pytest.raises(UsageError, match="not the --json output of a sharded gate run"):
        merge_shards([unsharded])


def test_merge_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    one, _ = _write_shards(tmp_path, 2, OUTCOMES)
    assert main(["merge", str(one)]) == 2
    assert main(["merge", str(tmp_path / "absent.json")]) == 2
    assert main(["--json", "merge", str(one)]) == 2  # the gate's options are not merge's
    assert main(["gate", "--shard", "3/2"]) == 2
    assert main(["gate", "--shard-timings", str(one)]) == 2  # without --shard


# ---- through the CLI: shards + merge == one unsharded run ------------------------------------------------


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return json.loads(capsys.readouterr().out)


def _verdicts(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(c["label"], c["pipeline"], c["expect_clean"], c["clean"], c["passed"]) for c in doc["cases"]]


def test_list_shows_one_shards_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = write_engine(tmp_path)
    targets = [f"{engine}:gate", f"{engine}:regressed"]
    parts = []
    for k in (1, 2):
        assert main(["list", *targets, "--shard", f"{k}/2", "--json"]) == 0
        parts.append([r["name"] for r in _json(capsys)])
    assert parts == [["split_step", "fused_expected_clean"], ["fused_control"]]


@pytest.mark.compile
def test_two_shards_merge_into_the_unsharded_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    engine = write_engine(tmp_path)
    gate = ["gate", f"{engine}:gate", f"{engine}:regressed", "--json", "--no-progress", "--jobs", "1"]
    assert main(gate) == 1  # fused_expected_clean clones: the merged run must fail the same way
    whole = _json(capsys)
    (tmp_path / "whole.json").write_text(json.dumps(whole))
    shard_files = []
    for k in (1, 2):  # balanced by the unsharded run's times, as a CI matrix would by its last run's
        code = main([*gate, "--shard", f"{k}/2", "--shard-timings", "whole.json"])
        doc = _json(capsys)
        assert doc["shard"]["index"] == k and doc["shard"]["count"] == 2 and doc["cases"]
        assert code == doc["exit_code"]
        shard_files.append(tmp_path / f"shard{k}.json")
        shard_files[-1].write_text(json.dumps(doc))
    assert main(["merge", *map(str, shard_files), "--json", "--junitxml", "merged.xml"]) == 1
    merged = _json(capsys)
    assert _verdicts(merged) == _verdicts(whole) and merged["exit_code"] == whole["exit_code"] == 1
    suite = ET.parse(tmp_path / "merged.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "3" and suite.get("failures") == "1"
    failing = [tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None]
    assert failing == ["fused_expected_clean"]
    assert main(["merge", *map(str, shard_files)]) == 1  # the table, same exit
    assert "3 case(s), 1 failed" in capsys.readouterr().out


def test_merge_refuses_a_shard_of_another_schema_version(tmp_path: Path) -> None:
    """A version-1 shard's ``check_errors`` held its failing findings too: read as version 2 they would
    be said twice. Negative control: the same shards at this version merge."""
    paths = _write_shards(tmp_path, 2, OUTCOMES)
    assert merge_shards(paths).outcomes
    old = json.loads(paths[0].read_text())
    paths[0].write_text(json.dumps({**old, "schema_version": 1}))
    with pytest.raises(UsageError, match="schema_version 1"):
        merge_shards(paths)
