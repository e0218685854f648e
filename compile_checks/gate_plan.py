"""What one gate run checks: the cases, under which pipeline, in which mode.

A :class:`PlannedCase` names its case by *how to build it* (a :class:`CaseSource` plus the
case's name), not by the object: a worker process (``--jobs``) rebuilds the case from that
description, and a zero-argument target factory gives fresh tensors per pipeline.

Modes: the verdict (does a pool clone survive?) is decided on the post-grad graph
(``analysis_only``), which costs dynamo + AOT + the post-grad passes and no C++ codegen.
The built-in gate adds a small, explicit codegen smoke (``FULL_COMPILE_SMOKE``, shown as
``split[codegen]``) compiled fully and checked compiled == eager; ``full`` compiles all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compile_checks.case import Case

BUILTIN = "builtin"
TARGET = "target"
CODEGEN_SUFFIX = "[codegen]"

# FALLBACK until scenarios lands: the default gate's cases and its codegen smoke
_FALLBACK_SMOKE: tuple[str, ...] = ("split", "fused")


@dataclass(frozen=True)
class CaseSource:
    """Where cases come from; ``load()`` builds them (fresh tensors unless the target is a Case)."""

    kind: str  # BUILTIN | TARGET
    spec: str = ""  # the target ("file.py:NAME" / "pkg.mod:NAME"); unused for BUILTIN
    base_dir: str = ""  # relative file targets are taken from here
    pipeline: str | None = None  # re-target every case to this pipeline; None keeps the case's own
    names: tuple[str, ...] = ()  # BUILTIN: the scenario names
    smoke: bool = False  # BUILTIN: the codegen smoke's commit-graph-only variants

    def load(self) -> list[Case]:
        if self.kind == BUILTIN and self.smoke:
            return smoke_cases(self.names)
        if self.kind == BUILTIN:
            return builtin_cases(self.names, (self.pipeline or "stock",))
        from compile_checks.targets import load_target

        cases = load_target(self.spec, self.base_dir or None)
        if self.pipeline is None:
            return cases
        # a Case instance target is re-targeted in place of a fresh build: the copy shares the
        # tensors (running it under two pipelines writes the same pools twice); a zero-argument
        # factory target is called again per pipeline and gets its own tensors
        return [c if c.pipeline == self.pipeline else c.replace(pipeline=self.pipeline) for c in cases]


@dataclass(frozen=True)
class PlannedCase:
    source: CaseSource
    case_name: str  # the Case.name within its source
    label: str  # unique in the run: tables, JUnit test names, dump folders
    pipeline: str
    expect_clean: bool
    analysis_only: bool
    codegen_smoke: bool = False

    @property
    def group(self) -> str:
        """JUnit classname: ``<target>/<pipeline>`` (``builtin/<pipeline>`` for built-in cases)."""
        where = self.source.spec if self.source.kind == TARGET else BUILTIN
        return f"{where}/{self.pipeline}"


@dataclass
class GatePlan:
    cases: list[PlannedCase] = field(default_factory=list)
    # cases built while planning, handed to the in-process runner so nothing is built twice
    preloaded: dict[CaseSource, list[Case]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def builtin_cases(names: Sequence[str] | None, pipelines: Sequence[str]) -> list[Case]:
    """``compile_checks.scenarios.builtin_cases`` (scenarios helper), or the stock-only fallback."""
    try:
        from compile_checks.scenarios import builtin_cases as real
    except ImportError:  # FALLBACK until scenarios lands
        return _fallback_builtin_cases(names, pipelines)
    return real(list(names) if names else None, pipelines=tuple(pipelines))


def smoke_cases(names: Sequence[str]) -> list[Case]:
    """The codegen smoke: each scenario with one denoising step per chunk, on the stock pipeline.

    One step per chunk means every step commits, so only the commit graph (the one with the pool
    write, whose generated code is the evidence) is compiled, through the whole host loop with
    eviction; the non-commit graph's verdict is already decided in analysis mode. Measured on the
    2-core box: split fully compiled in 54.9 s with 1 step vs 76.8 s with 3 (codegen 48 vs 72 s).
    """
    import dataclasses

    try:
        from compile_checks.scenarios import SCENARIOS, scenario_case
    except ImportError:  # FALLBACK until scenarios lands
        return builtin_cases(names, ("stock",))
    return [scenario_case(dataclasses.replace(SCENARIOS[n], denoise_steps=1)) for n in names]


def codegen_smoke_names() -> tuple[str, ...]:
    try:
        from compile_checks.scenarios import FULL_COMPILE_SMOKE
    except ImportError:  # FALLBACK until scenarios lands
        return _FALLBACK_SMOKE
    return tuple(FULL_COMPILE_SMOKE)


def scenario_names() -> list[str]:
    from compile_checks.scenarios import SCENARIOS

    return list(SCENARIOS)


def _fallback_builtin_cases(names: Sequence[str] | None, pipelines: Sequence[str]) -> list[Case]:
    # FALLBACK until scenarios lands: stock-only Cases over the current scenario host loop
    import torch

    from compile_checks.case import Case
    from compile_checks.scenarios import _TOLERANCE, DEFAULT_GATE, SCENARIOS, _max_diff, build_model, make_weights, run_loop

    def one(name: str) -> Case:
        s = SCENARIOS[name]
        weights = make_weights(s)
        model = build_model(s, weights)

        def driver(compiled):  # type: ignore[no-untyped-def]
            with torch.no_grad():
                return run_loop(s, model, compiled)

        def verify(stats):  # type: ignore[no-untyped-def]
            eager = build_model(s, weights)
            with torch.no_grad():
                eager_stats = run_loop(s, eager, eager.region_fn())
            pools = _max_diff(model.k_pools + model.v_pools, eager.k_pools + eager.v_pools)
            diff = max(pools, _max_diff(stats.latents, eager_stats.latents))
            return diff <= _TOLERANCE.get(s.dtype, 1e-4), diff

        return Case(name=name, fn=model.region_fn(), driver=driver, pools=model.named_pools(),
                    expect_clean=s.expect_clean, functionalization=s.functionalization, dynamic=s.dynamic,
                    inductor_config=dict(s.inductor_config), verify=verify, description=s.description,
                    meta={"scenario": s})

    if "stock" not in pipelines:
        return []  # the vllm pipelines' built-in cases come with the scenarios helper
    return [one(n) for n in (names or DEFAULT_GATE)]


def _add_source(plan: GatePlan, source: CaseSource, *, analysis_only: bool, smoke: bool = False) -> None:
    cases = source.load()
    plan.preloaded[source] = cases
    for c in cases:
        label = c.name
        if smoke:
            label += CODEGEN_SUFFIX
        elif source.kind == TARGET and source.pipeline is not None and c.pipeline != "stock":
            label += f"[{c.pipeline}]"
        plan.cases.append(PlannedCase(source, c.name, label, c.pipeline, c.expect_clean, analysis_only, smoke))


def plan_targets(
    specs: Sequence[str], base_dir: str | Path, pipelines: Sequence[str], *, full: bool
) -> GatePlan:
    """The user's cases, once per pipeline in ``pipelines`` (or each under its own when empty)."""
    plan = GatePlan()
    for spec in specs:
        for pipeline in pipelines or (None,):
            _add_source(plan, CaseSource(TARGET, spec, str(base_dir), pipeline), analysis_only=not full)
    _check_unique(plan)
    return plan


def plan_builtin(
    scenarios: Sequence[str], pipelines: Sequence[str], *, full: bool, smoke: bool = True
) -> GatePlan:
    """The built-in gate (``scenarios`` empty) or the named scenarios, per pipeline.

    Unknown names raise ``ValueError`` listing the valid ones (before anything compiles).
    """
    valid = scenario_names()
    unknown = [n for n in scenarios if n not in valid]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
    plan = GatePlan()
    for pipeline in pipelines or ("stock", "vllm"):
        before = len(plan.cases)
        _add_source(plan, CaseSource(BUILTIN, pipeline=pipeline, names=tuple(scenarios)), analysis_only=not full)
        if len(plan.cases) == before:  # FALLBACK until scenarios lands (stock-only built-in cases)
            plan.notes.append(f"no built-in cases for pipeline {pipeline!r} yet (scenarios helper's builtin_cases)")
    if smoke and not full and not scenarios:
        source = CaseSource(BUILTIN, pipeline="stock", names=codegen_smoke_names(), smoke=True)
        _add_source(plan, source, analysis_only=False, smoke=True)
    _check_unique(plan)
    return plan


def _check_unique(plan: GatePlan) -> None:
    seen: set[str] = set()
    dupes = sorted({p.label for p in plan.cases if p.label in seen or seen.add(p.label)})  # type: ignore[func-returns-value]
    if dupes:
        raise ValueError(f"duplicate case names in one gate run: {', '.join(dupes)}")


__all__ = ["CODEGEN_SUFFIX", "CaseSource", "GatePlan", "PlannedCase", "builtin_cases", "plan_builtin", "plan_targets"]
