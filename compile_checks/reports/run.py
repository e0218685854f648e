"""How the report runs a case: through ``run_case``, the gate's one run path, built-in or user's alike.

The report needs two facts besides the verdict: how many times the compiled callable was called
(a user's step is one call) and the final post-grad graphs (their ideal bytes,
:mod:`compile_checks.reports.ideal`). So the case's own driver is handed a counting wrapper of the
compiled callable, and Inductor's final graphs are read while ``run_case`` runs; the case, its
pipeline, its mode and its check (the write check included) are the gate's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compile_checks.case import Case, CaseResult, run_case
from compile_checks.pipelines import pipeline_settings
from compile_checks.reports.ideal import (
    case_ideal_per_run,
    ideal_bytes_per_run,
    record_final_graphs,
)
from compile_checks.reports.measure import CallCounter
from compile_checks.vocab import Mode, Pipeline

if TYPE_CHECKING:
    from compile_checks.check.findings import CloneReport
    from compile_checks.scenarios import Scenario


@dataclass
class ReportRun:
    """One case's run: ``run_case``'s result, the compiled callable's calls, the ideal over the run."""

    result: CaseResult
    calls: int
    ideal: tuple[int | None, str]  # bytes over the run (None: not derivable) and how they were obtained


def run_for_report(case: Case, mode: Mode, dump_dir: str | None = None) -> ReportRun:
    """``run_case(case)`` in ``mode``, counting the compiled callable's calls and reading the final graphs."""
    counters: list[CallCounter] = []

    def counting_driver(compiled: Any) -> Any:
        counters.append(CallCounter(compiled))
        if case.driver is not None:
            return case.driver(counters[-1])
        return counters[-1](*case.args, **dict(case.kwargs))

    with record_final_graphs() as graphs:
        # the case's own write check, as the gate runs it: a lost write is a failing row, never a clean one (nor
        # the model's ideal). It runs each call's captured graph eagerly inside the compiled call, not through
        # the driver: the counter still sees only the compiled callable's calls.
        counted = case.replace(driver=counting_driver)
        result = run_case(counted, analysis_only=mode.analysis_only, dump_dir=dump_dir)
    result.case = case  # the user's case, not the counting copy
    calls = sum(c.calls for c in counters)
    derived = ideal_bytes_per_run(graphs, result.report.region_calls, result.report.num_regions)
    return ReportRun(result, calls, case_ideal_per_run(case.ideal_bytes_per_call, calls, derived))


@dataclass(frozen=True)
class ScenarioRun:
    """A built-in scenario's run in its report row's terms: its ideal is the scenario's window model."""

    scenario: Scenario  # functionalization resolved to what the run compiled with
    report: CloneReport
    num_steps: int  # denoising steps of the whole run (all chunks)
    num_chunks: int
    ideal_read_bytes: int  # the resident window's K/V, all layers, all steps
    ideal_write_bytes: int  # each chunk's K/V, every layer, once
    compile_seconds: float
    wall_seconds: float
    pipeline: str = "stock"  # the pipeline it was compiled through


def run_builtin(
    scenario: Scenario, mode: Mode, dump_dir: str | None = None, pipeline: Pipeline = Pipeline.STOCK
) -> ScenarioRun:
    """The built-in scenario as a Case on ``pipeline``, through :func:`run_for_report`."""
    # here, not at the top: importing the scenarios imports vLLM (only after prepare_process_for_vllm)
    from compile_checks.scenarios import scenario_case

    run = run_for_report(scenario_case(scenario, pipeline), mode, dump_dir)
    stats = run.result.output  # the scenario driver's RunStats
    functionalization = scenario.functionalization or pipeline_settings(pipeline).functionalization
    return ScenarioRun(
        scenario=dataclasses.replace(scenario, functionalization=functionalization),
        report=run.result.report,
        num_steps=stats.num_steps,
        num_chunks=scenario.num_chunks,
        ideal_read_bytes=2 * scenario.num_layers * stats.resident_tokens_read * scenario.token_bytes,
        ideal_write_bytes=scenario.ideal_write_bytes,
        compile_seconds=run.result.compile_seconds,
        wall_seconds=run.result.wall_seconds,
        pipeline=str(pipeline),
    )


__all__ = ["ReportRun", "ScenarioRun", "run_builtin", "run_for_report"]
