"""``LazyCase``: ``list`` and planning read a target's cases without building them; the gate builds each
when it runs, and a build that disagrees with its declaration is that case's error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compile_checks.cli import main
from compile_checks.gate.plan import plan_targets
from compile_checks.gate.runner import CaseBuilder
from compile_checks.vocab import Mode
from tests._cli_cases import ENGINE

LAZY = """
from compile_checks import LazyCase

BUILT = []


def _build(name, fused, expect_clean):
    BUILT.append(name)
    return make(name, fused, expect_clean)


def lazy_gate():
    return [
        LazyCase("split_step", lambda: _build("split_step", False, True), expect_clean=True),
        LazyCase("fused_control", lambda: _build("fused_control", True, False), expect_clean=False),
    ]


def never_built():
    def boom():
        raise RuntimeError("built while listing")
    return [LazyCase("expensive", boom, expect_clean={"stock": True, "vllm": False})]


def wrong_declaration():
    return [LazyCase("split_step", lambda: make("split_step", False, True), expect_clean=False)]


def not_a_case():
    return [LazyCase("odd", lambda: 42)]
"""


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    path = tmp_path / "lazy_engine.py"
    path.write_text(ENGINE + LAZY)
    return path


def test_list_builds_no_lazy_case(engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", f"{engine}:never_built", "--json"]) == 0  # build() raises if called
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["expect_clean"]) for r in rows] == [("expensive", True), ("expensive[vllm]", False)]


def test_the_runner_builds_only_the_case_it_runs(engine: Path) -> None:
    plan = plan_targets([f"{engine}:lazy_gate"], engine.parent, [], mode=Mode.ANALYSIS)
    built = plan.preloaded[plan.cases[0].source][0].build.__globals__["BUILT"]  # the target module's list
    assert built == []  # planned, nothing built
    case = CaseBuilder(plan.preloaded).take(plan.cases[1])
    assert case.name == "fused_control" and built == ["fused_control"]


def test_a_build_that_disagrees_with_its_declaration_is_the_cases_error(
    engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["gate", f"{engine}:wrong_declaration", "--json", "--no-progress"]) == 4
    (case,) = json.loads(capsys.readouterr().out)["cases"]
    assert "LazyCaseError" in case["error"] and "declared (name, expect_clean, pipeline)" in case["error"]
    assert main(["gate", f"{engine}:not_a_case", "--json", "--no-progress"]) == 4
    assert "build() returned int, not a Case" in json.loads(capsys.readouterr().out)["cases"][0]["error"]


@pytest.mark.compile
def test_gate_runs_lazy_cases_like_cases(engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", f"{engine}:lazy_gate", "--json", "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(c["label"], c["clean"], c["passed"]) for c in doc["cases"]] == [
        ("split_step", True, True),
        ("fused_control", False, True),
    ]
