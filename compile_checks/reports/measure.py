"""``ms_per_step``: the measured time of a compiled step, per case (``--measure``).

Why: the extra bytes are what a surviving copy costs on paper; this is what it costs
on the machine. Each case is compiled fully by Inductor (the check's hooks are not
installed: they add wrappers), run once to compile and warm up, then all cases are
timed in interleaved rounds (a, b, c, then c, b, a, ...) so machine noise hits them
alike; ``ms_per_step`` is the median over rounds of one run's time / its steps.

A built-in scenario's run is its whole host loop (every chunk, every denoising
step, block-table bookkeeping included); a user's case runs its ``driver`` (or its
``args``) and a step is one call of the compiled function.
"""

from __future__ import annotations

import functools
import statistics
import time
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_ROUNDS = 7


@dataclass
class Timed:
    """One case ready to time: a zero-argument run and the steps it makes."""

    name: str
    run: Callable[[], Any]
    steps: int
    samples_s: list[float]

    @property
    def ms_per_step(self) -> float:
        return statistics.median(self.samples_s) * 1e3 / self.steps


def fresh_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its own code object, so Dynamo keeps a separate cache entry per case: its guards
    do not tell two cases apart whose tensors differ only in how they share storage (split vs fused)."""
    if not isinstance(fn, types.FunctionType):
        return fn  # modules and other callables: Dynamo guards on the object itself
    code = fn.__code__.replace(co_name=fn.__code__.co_name)
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return functools.update_wrapper(new, fn)


class CallCounter:
    """Wraps the compiled callable a driver receives and counts its calls (a step = one call)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.fn(*args, **kwargs)


def _inductor_patches(case: Any) -> dict[str, Any]:
    from compile_checks.pipelines import pipeline_settings

    settings = pipeline_settings(case.pipeline)
    func = case.functionalization or settings.functionalization
    return {
        **settings.inductor_config,
        **dict(case.inductor_config),
        "force_disable_caches": True,
        "enable_auto_functionalized_v2": func == "v2",
    }


def compiled_as_the_case_says(case: Any) -> Any:
    """``case.fn`` compiled the way ``run_case`` compiles it, without the check's hooks.

    Not ``run_case`` itself: the check wraps every compiled region and graph call (attribution,
    the write watch), which would be timed with the step. What ``run_case`` takes from the case is
    kept: ``Case.compile`` (the engine's own per-block / regional compile, handed Inductor as its
    backend), ``dynamic``, ``fullgraph`` and ``mode``; the pipeline's Inductor settings are patched
    in by the caller (``_inductor_patches``).
    """
    import torch

    if case.compile is not None:
        compiled = case.compile("inductor")
        return case.fn if compiled is None else compiled
    return torch.compile(fresh_function(case.fn), dynamic=case.dynamic, fullgraph=case.fullgraph, mode=case.mode)


def prepare(case: Any, steps: int | None = None) -> Timed:
    """Compile ``case`` fully and run it once (compile + warm-up); ``steps`` None: count calls."""
    import torch
    import torch._inductor.config as inductor_config

    from compile_checks.pipelines import probe_cpu_isa

    probe_cpu_isa()  # outside the compile's fresh cache folder (see probe_cpu_isa)
    patches = _inductor_patches(case)
    with inductor_config.patch(patches):
        compiled = compiled_as_the_case_says(case)

    def run() -> Any:
        counter = CallCounter(compiled)
        with torch.no_grad(), inductor_config.patch(patches):
            if case.driver is not None:
                case.driver(counter)
            else:
                counter(*case.args, **dict(case.kwargs))
        return counter.calls

    calls = run()
    return Timed(case.name, run, steps if steps is not None else max(1, calls), [])


def time_interleaved(timed: Sequence[Timed], rounds: int = DEFAULT_ROUNDS) -> dict[str, float]:
    """Median ms per step of each case over ``rounds`` interleaved rounds."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    for r in range(rounds):
        for t in timed if r % 2 == 0 else list(reversed(timed)):
            t0 = time.perf_counter()
            t.run()
            t.samples_s.append(time.perf_counter() - t0)
    return {t.name: t.ms_per_step for t in timed}


def scenario_measure_case(scenario: Any) -> tuple[Any, int]:
    """A built-in scenario as a Case to time, and its denoising steps per run."""
    from compile_checks.scenarios import scenario_case

    return scenario_case(scenario), scenario.num_chunks * scenario.denoise_steps


def measure(
    cases: Sequence[tuple[Any, int | None]], rounds: int = DEFAULT_ROUNDS, threads: int = 1
) -> dict[str, float]:
    """Compile and time ``(case, steps per run or None)`` pairs; case name -> median ms per step."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        torch._dynamo.reset()
        with warnings.catch_warnings():
            # caches are off on purpose (as in the check); dynamo says so once per process otherwise
            warnings.filterwarnings("ignore", message=".*dynamo_pgo force disabled.*")
            timed = [prepare(case, steps) for case, steps in cases]
            return time_interleaved(timed, rounds)
    finally:
        torch._dynamo.reset()
        torch.set_num_threads(saved)


__all__ = [
    "DEFAULT_ROUNDS",
    "CallCounter",
    "compiled_as_the_case_says",
    "fresh_function",
    "measure",
    "scenario_measure_case",
    "time_interleaved",
]
