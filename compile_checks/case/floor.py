"""A case compiled the floor way: plain ``torch.compile`` stopped after Inductor's post-grad passes.

Why: an analysis-only verdict costs dynamo + AOT + Inductor's post-grad passes, what plain
``torch.compile`` pays before its C++ codegen: the floor. Run beside the check on the same case
(``compile-checks gate --floor``, ``python -m compile_checks.reports.floor``), what the check adds
(graph analysis, pool attribution, the lost-write reference run, explanations) shows region by
region.

The floor run: Inductor's ``compile_fx`` as the backend (as ``backend="inductor"``), the
pipeline's Inductor settings and the case's, caches off, stopped after the post-grad passes (the
post-grad graph then runs, as in the check), the case's own ``Case.compile`` / driver. A region's
seconds run from dynamo's frame start to the backend's return (recompiles are regions of their own).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock


class _Stop(BaseException):
    """Raised after the post-grad passes (a BaseException: Inductor's ``except Exception`` lets it by)."""

    def __init__(self, gm: Any) -> None:
        super().__init__("floor: stop after post-grad passes")
        self.gm = gm


@dataclass
class FloorRun:
    """Seconds per compiled region (dynamo start to the backend's return) and the whole run."""

    region_seconds: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0


def _fx_output(gm: Any) -> Any:
    from torch._inductor.output_code import MockFXGraphCacheOutput

    out = MockFXGraphCacheOutput(gm=None)

    def call(args: list[Any]) -> Any:
        return gm(*args)

    out.current_callable = call  # type: ignore[attr-defined]
    out.gm = call  # type: ignore[attr-defined]
    return out


@contextlib.contextmanager
def _floor_inductor(run: FloorRun, inductor_config: dict[str, Any]) -> Iterator[Callable[..., Any]]:
    """A backend: ``compile_fx`` stopped after the post-grad passes; records each region's seconds."""
    import torch
    import torch._inductor.config as config
    from torch._dynamo.callback import callback_handler
    from torch._inductor import compile_fx as compile_fx_module

    original_post_grad = compile_fx_module.post_grad_passes
    started: list[float] = []

    def post_grad_passes(gm: Any, is_inference: bool) -> None:
        original_post_grad(gm, is_inference)
        raise _Stop(gm)

    def inner_compile(gm: Any, example_inputs: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return compile_fx_module.compile_fx_inner(gm, example_inputs, *args, **kwargs)
        except _Stop as stop:
            return _fx_output(stop.gm)

    def backend(gm: Any, example_inputs: Sequence[Any]) -> Any:
        compiled = compile_fx_module.compile_fx(gm, example_inputs, inner_compile=inner_compile)
        run.region_seconds.append(time.perf_counter() - (started[-1] if started else time.perf_counter()))
        return compiled

    def frame_started(_args: object = None) -> None:
        started.append(time.perf_counter())

    torch._dynamo.reset()
    callback_handler.register_start_callback(frame_started)
    try:
        with (
            config.patch({**inductor_config, "force_disable_caches": True}),
            mock.patch.object(compile_fx_module, "post_grad_passes", post_grad_passes),
        ):
            yield backend
    finally:
        callback_handler.remove_start_callback(frame_started)
        torch._dynamo.reset()


def run_through(case: Any, backend: Callable[..., Any]) -> None:
    """Compile ``case`` through ``backend`` as its engine does (its ``compile`` hook, else ``torch.compile``
    with the case's ``dynamic`` / ``fullgraph``) and run it once (its driver, else one call)."""
    import torch

    if case.compile is not None:
        compiled = case.compile(backend) or case.fn
    else:
        compiled = torch.compile(case.fn, backend=backend, dynamic=case.dynamic, fullgraph=case.fullgraph)
    with case.grad_mode():  # torch.no_grad() unless Case(no_grad=False), as run_case runs it
        if case.driver is not None:
            case.driver(compiled)
        else:
            compiled(*case.args, **dict(case.kwargs))


def floor_run(case: Any) -> FloorRun:
    """``case`` under plain ``torch.compile`` stopped after the post-grad passes (stock settings + the case's)."""

    from compile_checks.pipelines import pipeline_settings

    settings = pipeline_settings(case.pipeline)
    functionalization = case.functionalization or settings.functionalization
    patches = {
        **settings.inductor_config,
        **dict(case.inductor_config),
        "enable_auto_functionalized_v2": functionalization == "v2",
    }
    run = FloorRun()
    t0 = time.perf_counter()
    with _floor_inductor(run, patches) as backend:
        run_through(case, backend)
    run.wall_seconds = time.perf_counter() - t0
    return run


def check_run(case: Any) -> FloorRun:
    """``run_case(case, analysis_only=True)``: seconds per region (dynamo + AOT + post-grad + the check's)."""
    from compile_checks.case.run import run_case

    result = run_case(case, analysis_only=True)
    return FloorRun(check_region_seconds(result.report), result.wall_seconds)


def check_region_seconds(report: Any) -> list[float]:
    """The check's seconds per region of a ``CloneReport`` (its compile phases, summed), in region order."""
    per_region = report.region_phase_seconds
    return [sum(float(v) for v in per_region[i].values()) for i in sorted(per_region)]


__all__ = ["FloorRun", "check_region_seconds", "check_run", "floor_run", "run_through"]
