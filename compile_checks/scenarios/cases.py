"""Built-in scenarios as :class:`compile_checks.case.Case`: the gate runs them like a user's case.

``scenario_case(s, pipeline)`` builds the model and pools, and gives ``run_case`` the region
function (``fn``), the host loop (``driver``) and an eager reference (``verify``).
``run_scenario`` is the old entry point, now a thin wrapper over ``run_case``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compile_checks.case import Case, CaseResult, run_case
from compile_checks.vocab import PIPELINES
from compile_checks.scenarios.host_loop import RunStats, make_driver, make_verify, pools_written
from compile_checks.scenarios.layouts import build_model
from compile_checks.scenarios.model import make_weights
from compile_checks.scenarios.registry import DEFAULT_GATE, SCENARIOS
from compile_checks.scenarios.spec import Scenario

if TYPE_CHECKING:
    from compile_checks.check.findings import CloneReport
    from compile_checks.scenarios.model import Model


def case_name(s: Scenario, pipeline: str) -> str:
    """``"split"`` on the stock pipeline, ``"split@vllm"`` on another."""
    return s.name if pipeline == "stock" else f"{s.name}@{pipeline}"


def _resolve(name_or_scenario: str | Scenario, arg: str = "name_or_scenario") -> Scenario:
    if isinstance(name_or_scenario, Scenario):
        return name_or_scenario
    if isinstance(name_or_scenario, str):
        if name_or_scenario not in SCENARIOS:
            raise ValueError(f"{arg}: unknown scenario {name_or_scenario!r}; valid: {', '.join(SCENARIOS)}")
        return SCENARIOS[name_or_scenario]
    raise ValueError(f"{arg} must be a scenario name or a Scenario, got {type(name_or_scenario).__name__}")


def scenario_case(
    name_or_scenario: str | Scenario, pipeline: str = "stock", progress: Callable[[], None] | None = None
) -> Case:
    """The scenario as a fresh Case (its own zeroed pools) on ``pipeline``.

    ``meta["scenario"]`` is the Scenario, ``meta["model"]`` the pools and weights the run writes.
    ``progress`` is called after every denoising step.
    """
    s = _resolve(name_or_scenario)
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}, got {pipeline!r}")
    weights = make_weights(s)
    model = build_model(s, weights)

    def eager() -> tuple[Model, RunStats]:
        reference = build_model(s, weights)
        return reference, make_driver(s, reference)(reference.region_fn())

    return Case(
        name=case_name(s, pipeline),
        fn=model.region_fn(),
        pools=model.named_pools(),
        expect_clean=s.expect_clean,
        driver=make_driver(s, model, progress),
        functionalization=s.functionalization,
        dynamic=s.dynamic,
        inductor_config=dict(s.inductor_config),
        pipeline=pipeline,
        verify=make_verify(s, model, eager),
        ideal_bytes_per_call=s.ideal_bytes_per_call,
        description=s.description,
        meta={"scenario": s, "model": model},
    )


def builtin_cases(names: Iterable[str] | None = None, pipelines: Sequence[str] = ("stock", "vllm")) -> list[Case]:
    """One Case per (scenario, pipeline), scenario-major; ``names=None`` is the default gate."""
    if isinstance(pipelines, str):
        raise ValueError(f"pipelines must be a sequence of pipeline names, got the string {pipelines!r}")
    bad = [p for p in pipelines if p not in PIPELINES]
    if bad:
        raise ValueError(f"pipelines must be drawn from {PIPELINES}, got {bad}")
    if isinstance(names, str):
        raise ValueError(f"names must be a sequence of scenario names, got the string {names!r}")
    chosen = [_resolve(n, "names") for n in (DEFAULT_GATE if names is None else names)]
    return [scenario_case(s, p) for s in chosen for p in pipelines]


@dataclass
class ScenarioResult:
    """One scenario run: the CaseResult plus the host loop's accounting (read by cli and reports)."""

    scenario: Scenario  # functionalization resolved to what the run compiled with
    report: CloneReport
    num_steps: int  # denoising steps executed in the run (all chunks)
    num_chunks: int
    ideal_read_bytes: int  # the resident window K/V, all layers, all steps
    ideal_write_bytes: int  # chunk K/V of every layer, once per chunk
    compile_seconds: float
    wall_seconds: float
    eager_match: bool = True  # compiled pools/latents == an eager run's
    max_abs_diff: float = 0.0  # max |compiled - eager| / max(1, max |eager|) over pools and latents
    evicted_blocks: int = 0  # blocks the chunk-window manager nulled during the run
    notes: list[str] = field(default_factory=list)
    case_result: CaseResult | None = None

    @property
    def clean(self) -> bool:
        """No pool copy and nothing that makes the check unusable (errors, blind spots)."""
        return self.report.check_passed

    @property
    def passed(self) -> bool:
        """The verdict the scenario expects, from a usable check (a broken check never passes)."""
        return not self.report.problems and self.report.clean == self.scenario.expect_clean

    @property
    def clone_traffic_per_run(self) -> int:
        """Bytes the surviving clones move over the run (read + write, every region call)."""
        per_region: dict[int, set[tuple[str, int]]] = {}
        for c in self.report.clones:
            per_region.setdefault(c.region, set()).add((c.node, c.nbytes))
        return sum(
            2 * sum(n for _, n in nodes) * self.report.region_calls.get(region, 0) for region, nodes in per_region.items()
        )


def run_scenario(
    s: Scenario,
    dump_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
    analysis_only: bool = False,
    pipeline: str = "stock",
) -> ScenarioResult:
    """Run ``scenario_case(s, pipeline)`` through ``run_case``; the result in the scenario's terms.

    ``analysis_only`` stops Inductor after its post-grad passes and runs that graph (no C++
    codegen): same verdict, much faster, no kernel bytes.
    """
    t0 = time.perf_counter()
    bar, tick = _progress(s, progress)
    try:
        case = scenario_case(s, pipeline, progress=tick)
        cr = run_case(case, analysis_only=analysis_only, dump_dir=None if dump_dir is None else str(dump_dir))
    finally:
        if bar is not None:
            bar.close()
    stats: RunStats = cr.output
    result = ScenarioResult(
        scenario=dataclasses.replace(s, functionalization=s.functionalization or _pipeline_functionalization(pipeline)),
        report=cr.report,
        num_steps=stats.num_steps,
        num_chunks=s.num_chunks,
        ideal_read_bytes=2 * s.num_layers * stats.resident_tokens_read * s.token_bytes,
        ideal_write_bytes=s.ideal_write_bytes,
        compile_seconds=cr.compile_seconds,
        wall_seconds=time.perf_counter() - t0,
        eager_match=bool(cr.eager_match),
        max_abs_diff=float(cr.max_abs_diff or 0.0),
        evicted_blocks=stats.evicted_blocks,
        notes=list(cr.notes),
        case_result=cr,
    )
    if not pools_written(case.meta["model"]):
        result.notes.append("the compiled run left the pools all zero: the commit write did not land")
    return result


def _pipeline_functionalization(pipeline: str) -> str:
    from compile_checks.pipelines import pipeline_settings

    return pipeline_settings(pipeline).functionalization


def _progress(s: Scenario, enabled: bool) -> tuple[Any, Callable[[], None] | None]:
    if not enabled:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=s.num_chunks * s.denoise_steps, desc=s.name, unit="step", leave=False)
    return bar, lambda: bar.update(1)


__all__ = ["ScenarioResult", "builtin_cases", "case_name", "run_scenario", "scenario_case"]
