"""examples/engine_tp through the gate: 2 ranks under gloo, head-sharded pools, collectives in the graph.

``tp_split`` is clean on both ranks, ``tp_fused`` clones on both (the negative control), and
``tp_asymmetric`` (rank 1's cache fused) clones on rank 1 only and is reported as ranks that differ.
The same runs judged against other expectations fail (tests/test_ranks_merge.py covers that on plain data).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compile_checks.gate.commands import exit_code
from compile_checks.gate.outputs import json_document, verdict_table
from compile_checks.gate.plan import plan_targets
from compile_checks.gate.runner import Outcome, run_plan
from compile_checks.vocab import ExitCode, Mode

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "engine_tp"

pytestmark = pytest.mark.compile


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Outcome]:
    plan = plan_targets(["cases.py:cases"], EXAMPLE, [], mode=Mode.ANALYSIS)
    return {o.label: o for o in run_plan(plan)}


def test_split_pools_are_clean_on_every_rank(outcomes: dict[str, Outcome]) -> None:
    o = outcomes["tp_split"]
    assert o.passed and o.clean is True and o.eager_match is True
    assert o.report["verdict"] == "clean on 2 ranks" and set(o.report["ranks"]) == {"0", "1"}
    assert all(r["report"]["num_regions"] >= 1 for r in o.report["ranks"].values())
    assert {key.split()[0] for key in o.report["recompiles"]} == {"rank0", "rank1"}  # the graphs column: every rank


def test_fused_pools_clone_on_every_rank(outcomes: dict[str, Outcome]) -> None:
    o = outcomes["tp_fused"]
    assert o.passed and o.clean is False and not o.report["differences"]
    assert {c["rank"] for c in o.clones} == {0, 1}
    assert {(c["rank"], c["pool"]) for c in o.clones} >= {(0, "layer0.v"), (1, "layer0.v")}


def test_only_rank_1_clones_and_the_report_says_the_ranks_differ(outcomes: dict[str, Outcome]) -> None:
    o = outcomes["tp_asymmetric"]
    assert o.passed and o.clean is False
    assert {c["rank"] for c in o.clones} == {1}
    assert o.report["differences"] == [o.report["verdict"]]
    assert o.report["verdict"].startswith("ranks differ: rank 0 clean; rank 1 2 clone(s) layer0.v,layer1.v")


def test_the_gate_outputs_carry_the_ranks(outcomes: dict[str, Outcome]) -> None:
    runs = list(outcomes.values())
    assert exit_code(runs) == ExitCode.CLEAN
    doc = json.loads(json_document(runs, exit_code(runs), 1.0, []))
    asym = next(c for c in doc["cases"] if c["label"] == "tp_asymmetric")
    assert asym["report"]["expect_clean_by_rank"] == [True, False] and asym["clones"][0]["rank"] == 1
    cells = [cell for column in verdict_table(runs, "t").columns for cell in column._cells]
    assert any(str(cell).startswith("ranks differ: rank 0 clean") for cell in cells)
