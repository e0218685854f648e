"""What the gate plans to run (no compile), and the ``--jobs`` process pool on a user's file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compile_checks.cli import main
from compile_checks.gate.plan import CODEGEN_SUFFIX, codegen_smoke_names, plan_builtin, plan_targets
from compile_checks.vocab import Mode
from tests._cli_cases import write_engine


def test_default_gate_decides_verdicts_analysis_only_plus_a_codegen_smoke() -> None:
    plan = plan_builtin([], [], mode=Mode.ANALYSIS)
    verdicts = [p for p in plan.cases if not p.codegen_smoke]
    smoke = [p for p in plan.cases if p.codegen_smoke]
    assert verdicts and all(p.analysis_only for p in verdicts)
    assert [p.label for p in smoke] == [n + CODEGEN_SUFFIX for n in codegen_smoke_names()]
    assert all(not p.analysis_only and p.pipeline == "stock" for p in smoke)
    assert any(not p.expect_clean for p in smoke)  # the fused negative control is compiled for real
    full = plan_builtin([], [], mode=Mode.FULL)
    assert all(not p.analysis_only and not p.codegen_smoke for p in full.cases)
    assert {p.label for p in full.cases} == {p.label for p in verdicts}
    bare = plan_builtin([], [], mode=Mode.ANALYSIS_ONLY)  # --analysis-only: the same verdicts, no smoke
    assert all(p.analysis_only and not p.codegen_smoke for p in bare.cases)
    assert [p.label for p in bare.cases] == [p.label for p in verdicts]


def test_pipelines_retarget_every_user_case(tmp_path: Path) -> None:
    engine = write_engine(tmp_path)
    plan = plan_targets([f"{engine}:gate"], tmp_path, ["stock", "vllm"], mode=Mode.ANALYSIS)
    assert [(p.label, p.pipeline) for p in plan.cases] == [
        ("split_step", "stock"),
        ("fused_control", "stock"),
        ("split_step[vllm]", "vllm"),
        ("fused_control[vllm]", "vllm"),
    ]
    # a factory target is called again per pipeline: each pipeline's cases own their tensors
    from compile_checks.gate.runner import CaseBuilder

    builder = CaseBuilder(plan.preloaded)
    stock, vllm = (builder.take(p) for p in (plan.cases[0], plan.cases[2]))
    assert vllm.pipeline == "vllm" and stock.args[0] is not vllm.args[0]


@pytest.mark.compile
def test_jobs_2_runs_cases_in_worker_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = write_engine(tmp_path)
    assert main(["gate", f"{engine}:gate", "--jobs", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(c["label"], c["clean"]) for c in doc["cases"]] == [("split_step", True), ("fused_control", False)]


def test_codegen_labels_are_printed_verbatim(capsys: pytest.CaptureFixture[str]) -> None:
    """``[codegen]`` is not swallowed as rich markup (it was: the smoke rows read plain ``split``)."""
    from compile_checks.gate.outputs import print_results
    from compile_checks.gate.runner import Outcome

    o = Outcome("split[codegen]", "builtin/stock", "stock", True, False, True, clean=True, eager_match=True)
    print_results([o], title="gate", code=0, seconds=1.0, notes=[], timings=True)
    assert capsys.readouterr().out.count("split[codegen]") == 2  # verdict table and timings table


def test_auto_jobs_keeps_small_plans_in_process() -> None:
    from compile_checks.gate.runner import AUTO_JOBS_MIN_CASES, auto_jobs

    assert auto_jobs(AUTO_JOBS_MIN_CASES - 1) == 1
    import os

    assert auto_jobs(AUTO_JOBS_MIN_CASES) == min(2, os.cpu_count() or 1)
