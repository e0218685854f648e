"""The check's compile cost against its floor, per compiled region, side by side.

Why: an analysis-only verdict costs dynamo + AOT + Inductor's post-grad passes; that is
the floor, what plain ``torch.compile`` pays before its C++ codegen. Whatever the check
adds on top (graph analysis, pool attribution, the lost-write reference run, explanations)
shows as the difference, region by region: for an engine compiled per block (vLLM-Omni's
DreamZero, ``examples/engine_blocks``) a per-region cost that grows with the regions is
the check's, not Inductor's.

The floor run is plain ``torch.compile`` with Inductor's ``compile_fx`` as the backend (as
``backend="inductor"``), the pipeline's Inductor settings, caches off, stopped after
the post-grad passes (the post-grad graph then runs, as in the check), the case's own
``Case.compile`` / driver; the check run is ``run_case(analysis_only=True)``. Both run
``rounds`` times, interleaved (floor, check, check, floor, ...) so machine noise hits
them alike; the table shows each region's median seconds (first compile of each region;
recompiles are regions of their own). ``python -m compile_checks.reports.floor TARGET``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
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


def floor_run(case: Any) -> FloorRun:
    """``case`` under plain ``torch.compile`` stopped after the post-grad passes (stock settings + the case's)."""
    import torch

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
        if case.compile is not None:
            compiled = case.compile(backend) or case.fn
        else:
            compiled = torch.compile(case.fn, backend=backend, dynamic=case.dynamic, fullgraph=case.fullgraph)
        if case.driver is not None:
            case.driver(compiled)
        else:
            compiled(*case.args, **dict(case.kwargs))
    run.wall_seconds = time.perf_counter() - t0
    return run


def check_run(case: Any) -> FloorRun:
    """``run_case(case, analysis_only=True)``: seconds per region (dynamo + AOT + post-grad + the check's)."""
    from compile_checks.case import run_case

    result = run_case(case, analysis_only=True)
    per_region = result.report.region_phase_seconds
    regions = [sum(float(v) for v in per_region[i].values()) for i in sorted(per_region)]
    return FloorRun(regions, result.wall_seconds)


@dataclass
class FloorTable:
    """Median seconds per region, floor vs check, over interleaved rounds."""

    case: str
    floor: list[float]
    check: list[float]
    floor_wall: float
    check_wall: float

    def lines(self) -> list[str]:
        out = [f"{self.case}: per region, median s (floor = plain torch.compile stopped after post-grad)"]
        out.append(f"{'region':>6} {'floor':>8} {'check':>8} {'check/floor':>11}")
        for i in range(max(len(self.floor), len(self.check))):
            f = self.floor[i] if i < len(self.floor) else float("nan")
            c = self.check[i] if i < len(self.check) else float("nan")
            out.append(f"{i:>6} {f:>8.3f} {c:>8.3f} {c / f if f else float('nan'):>10.2f}x")
        total_f, total_c = sum(self.floor), sum(self.check)
        out.append(f"{'total':>6} {total_f:>8.3f} {total_c:>8.3f} {total_c / total_f if total_f else 0:>10.2f}x")
        out.append(
            f"{'wall':>6} {self.floor_wall:>8.3f} {self.check_wall:>8.3f} "
            f"{self.check_wall / self.floor_wall if self.floor_wall else 0:>10.2f}x  (the run: compiles + host loop"
            " + the check's eager reference)"
        )
        return out


def _medians(runs: Sequence[FloorRun]) -> tuple[list[float], float]:
    n = min(len(r.region_seconds) for r in runs)
    return [statistics.median(r.region_seconds[i] for r in runs) for i in range(n)], statistics.median(
        r.wall_seconds for r in runs
    )


def compare(load: Callable[[], Sequence[Any]], rounds: int = 3) -> list[FloorTable]:
    """Each case of ``load()`` (called again per run: fresh tensors), floor vs check, interleaved."""
    names = [c.name for c in load()]
    tables = []
    for i, name in enumerate(names):
        floors: list[FloorRun] = []
        checks: list[FloorRun] = []
        for r in range(rounds):
            order = (floor_run, check_run) if r % 2 == 0 else (check_run, floor_run)
            for fn in order:
                (floors if fn is floor_run else checks).append(fn(load()[i]))
        floor, floor_wall = _medians(floors)
        check, check_wall = _medians(checks)
        tables.append(FloorTable(name, floor, check, floor_wall, check_wall))
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    from compile_checks.gate.targets import load_target
    from compile_checks.pipelines.vllm_env import prepare_process_for_vllm

    parser = argparse.ArgumentParser(prog="python -m compile_checks.reports.floor", description=__doc__.split("\n")[0])
    parser.add_argument("target", help="file.py:NAME or pkg.mod:NAME (a Case, a list of Cases or a factory)")
    parser.add_argument("--case", action="append", default=[], help="only these case names (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    prepare_process_for_vllm()

    def load() -> list[Any]:
        cases = load_target(args.target, None)
        return [c for c in cases if not args.case or c.name in args.case]

    for table in compare(load, args.rounds):
        print("\n".join(table.lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["FloorRun", "FloorTable", "check_run", "compare", "floor_run"]
