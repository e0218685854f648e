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
    from compile_checks.gate.outcome import Outcome
    from compile_checks.gate.outputs import print_results

    o = Outcome("split[codegen]", "builtin/stock", "stock", True, False, True, clean=True, eager_match=True)
    print_results([o], title="gate", code=0, seconds=1.0, notes=[], timings=True)
    assert capsys.readouterr().out.count("split[codegen]") == 2  # verdict table and timings table


def test_auto_jobs_keeps_small_plans_in_process() -> None:
    from compile_checks.gate.runner import AUTO_JOBS_MIN_CASES, auto_jobs

    assert auto_jobs(AUTO_JOBS_MIN_CASES - 1) == 1
    import os

    assert auto_jobs(AUTO_JOBS_MIN_CASES) == min(2, os.cpu_count() or 1)


def test_workers_start_before_planning_only_when_the_jobs_are_known() -> None:
    """The built-in gate (always 8+ cases) and ``--jobs N`` spawn their worker before planning; a run
    whose size is known only once planned (targets, --scenario, --shard, a pyproject table) does not."""
    import argparse
    import os

    from compile_checks.gate.commands import early_jobs
    from compile_checks.gate.config import GateConfig

    def args(**kw: object) -> argparse.Namespace:
        base = dict(jobs=None, targets=[], scenario=None, shard=None)
        return argparse.Namespace(**{**base, **kw})

    auto = min(2, os.cpu_count() or 1)
    assert early_jobs(args(), "gate", None) == auto
    assert early_jobs(args(jobs=3), "gate", None) == 3
    assert early_jobs(args(jobs=1), "gate", None) == 1
    assert early_jobs(args(targets=["x.py:cases"]), "gate", None) == 1
    assert early_jobs(args(scenario=["split"]), "gate", None) == 1
    assert early_jobs(args(shard="1/2"), "gate", None) == 1
    assert early_jobs(args(), "dump", None) == 1
    table = GateConfig.from_table(Path("pyproject.toml"), {"targets": ["cases.py:cases"]})
    assert early_jobs(args(), "gate", table) == 1
    # what an early worker imports besides the checker: the scenarios, when the plan will be built-in ones
    from compile_checks.gate.commands import checks_builtin

    assert checks_builtin(args(), None) and checks_builtin(args(scenario=["split"]), table)
    assert not checks_builtin(args(targets=["x.py:cases"]), None) and not checks_builtin(args(), table)


def test_workers_not_needed_are_stopped_not_awaited() -> None:
    """A pool started early for a run that then stays in-process is terminated, not left importing."""
    import time

    from compile_checks.gate.plan import GatePlan
    from compile_checks.gate.runner import Workers, run_plan

    workers = Workers(2)
    processes = list(workers.pool._processes.values())  # type: ignore[attr-defined]
    assert processes and all(p.is_alive() for p in processes)  # started at construction
    t0 = time.perf_counter()
    assert run_plan(GatePlan(), jobs=1, workers=workers) == []
    assert time.perf_counter() - t0 < 10
    assert not any(p.is_alive() for p in processes)


def test_stopped_workers_read_dead_although_the_pools_thread_reaps_them_too() -> None:
    """The pool's manager thread joins the same processes: judged before it stored their exit codes,
    a reaped worker reads alive (``waitpid`` gives the loser ECHILD). Seen in CI; before the fix
    ``stop()`` left one alive in 5 of 40 tries here, so 40 tries catch it almost surely."""
    from compile_checks.gate.runner import Workers

    alive_after_stop = 0
    for _ in range(40):
        workers = Workers(2)
        processes = list(workers.pool._processes.values())  # type: ignore[attr-defined]
        workers.stop()
        alive_after_stop += any(p.is_alive() for p in processes)
    assert alive_after_stop == 0
