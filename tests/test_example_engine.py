"""examples/engine (a user's engine with its own model file) gates as its pyproject says.

The cases are loaded the way the CLI loads them (``load_target`` on the file target its
``[tool.compile_checks]`` names) and run through ``run_case``, analysis-only. The fused case
is the example's own negative control: it must keep its pool clones.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from compile_checks import run_case
from compile_checks.gate.targets import load_targets

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "engine"


@pytest.fixture(scope="module")
def example_results():
    config = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["compile_checks"]
    assert config["targets"] == ["cases.py:cases"]
    cases = load_targets(config["targets"], base_dir=EXAMPLE)
    return {case.name: run_case(case, analysis_only=True) for case in cases}


def test_example_has_a_split_case_and_a_fused_negative_control(example_results) -> None:
    assert {name: r.case.expect_clean for name, r in example_results.items()} == {"split": True, "fused": False}


def test_split_pools_are_written_in_place(example_results) -> None:
    split = example_results["split"]
    assert split.check_passed and split.passed
    assert split.eager_match is True, split.notes  # the compiled host loop matches eager


def test_fused_pools_keep_a_clone_per_layer(example_results) -> None:
    fused = example_results["fused"]
    assert not fused.check_passed and fused.passed  # the negative control still sees the bug
    assert {c.pool for c in fused.report.clones} == {"layer0.v", "layer1.v"}
    assert all(c.op == "ar_paging::paged_write" and c.nbytes > 0 for c in fused.report.clones)
    assert fused.eager_match is True, fused.notes
