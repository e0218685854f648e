"""Built-in scenarios as :class:`compile_checks.case.Case`: the gate runs them like a user's case.

``scenario_case(s, pipeline)`` builds the model and pools, and gives ``run_case`` the region
function (``fn``), the host loop (``driver``, whose :class:`~.host_loop.RunStats` is the result's
``output``) and an eager reference (``verify``). ``builtin_cases`` is the built-in gate's cases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from compile_checks.case import Case, pipeline_label
from compile_checks.pipelines import pipeline_of
from compile_checks.scenarios.host_loop import RunStats, make_driver, make_verify
from compile_checks.scenarios.layouts import build_model
from compile_checks.scenarios.model import make_weights
from compile_checks.scenarios.registry import DEFAULT_GATE, SCENARIOS
from compile_checks.scenarios.spec import Scenario
from compile_checks.vocab import Pipeline

if TYPE_CHECKING:
    from compile_checks.scenarios.model import Model


def _resolve(name_or_scenario: str | Scenario, arg: str = "name_or_scenario") -> Scenario:
    if isinstance(name_or_scenario, Scenario):
        return name_or_scenario
    if isinstance(name_or_scenario, str):
        if name_or_scenario not in SCENARIOS:
            raise ValueError(f"{arg}: unknown scenario {name_or_scenario!r}; valid: {', '.join(SCENARIOS)}")
        return SCENARIOS[name_or_scenario]
    raise ValueError(f"{arg} must be a scenario name or a Scenario, got {type(name_or_scenario).__name__}")


def scenario_case(
    name_or_scenario: str | Scenario,
    pipeline: Pipeline = Pipeline.STOCK,
    progress: Callable[[], None] | None = None,
) -> Case:
    """The scenario as a fresh Case (its own zeroed pools) on ``pipeline`` (``Case`` validates it).

    ``meta["scenario"]`` is the Scenario, ``meta["model"]`` the pools and weights the run writes.
    ``progress`` is called after every denoising step.
    """
    s = _resolve(name_or_scenario)
    weights = make_weights(s)
    model = build_model(s, weights)

    def eager() -> tuple[Model, RunStats]:
        reference = build_model(s, weights)
        return reference, make_driver(s, reference)(reference.region_fn())

    return Case(
        name=pipeline_label(s.name, pipeline),  # split, split[vllm]
        fn=model.region_fn(),
        pools=model.named_pools(),
        expect_clean=s.expect_clean,
        driver=make_driver(s, model, progress),
        functionalization=s.functionalization,  # type: ignore[arg-type]  # a name: Case coerces it
        dynamic=s.dynamic,
        inductor_config=dict(s.inductor_config),
        pipeline=pipeline,
        verify=make_verify(s, model, eager),
        ideal_bytes_per_call=s.ideal_bytes_per_call,
        description=s.description,
        meta={"scenario": s, "model": model},
    )


def builtin_cases(
    names: Iterable[str] | None = None, pipelines: Sequence[Pipeline] = (Pipeline.STOCK, Pipeline.VLLM)
) -> list[Case]:
    """The built-in gate's cases: one per (scenario, pipeline), scenario-major; ``names=None`` is the
    default gate, which under a vLLM pipeline also holds ``compile_checks.scenarios.vllm_module``'s
    ``@support_torch_compile`` layer and its fused twin, compiled through vLLM's own wrapper."""
    if isinstance(pipelines, str):
        raise ValueError(f"pipelines must be a sequence of pipeline names, got the string {pipelines!r}")
    if isinstance(names, str):
        raise ValueError(f"names must be a sequence of scenario names, got the string {names!r}")
    chosen = [_resolve(n, "names") for n in (DEFAULT_GATE if names is None else names)]
    cases = [scenario_case(s, p) for s in chosen for p in pipelines]
    if names is None and any(pipeline_of(p).vllm_modules for p in pipelines):
        from compile_checks.scenarios.vllm_module import (
            vllm_module_cases,  # lazy: registers a custom op only the vLLM gate uses
        )

        cases += [c for p in pipelines if pipeline_of(p).vllm_modules for c in vllm_module_cases(pipeline=p)]
    return cases


__all__ = ["builtin_cases", "scenario_case"]
