"""What one gate run checks: the cases, under which pipeline, in which mode.

A :class:`PlannedCase` names its case by *how to build it* (a :class:`CaseSource` plus the
case's name), not by the object: a worker process (``--jobs``) rebuilds the case from that
description, and a zero-argument target factory gives fresh tensors per pipeline.

Modes: the verdict (does a pool clone survive?) is decided on the post-grad graph
(``analysis_only``), which costs dynamo + AOT + the post-grad passes and no C++ codegen.
The built-in gate adds a small, explicit codegen smoke (``FULL_COMPILE_SMOKE``, shown as
``split[codegen]``) compiled fully and checked compiled == eager; :class:`~compile_checks.vocab.Mode`
(resolved once by the CLI) says which: ``ANALYSIS`` (smoke), ``ANALYSIS_ONLY`` (none), ``FULL`` (all).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compile_checks.case import Case, pipeline_label
from compile_checks.gate.targets import load_target
from compile_checks.vocab import Mode, Pipeline

BUILTIN = "builtin"
TARGET = "target"
CODEGEN_SUFFIX = "[codegen]"


@dataclass(frozen=True)
class CaseSource:
    """Where cases come from; ``load()`` builds them (fresh tensors unless the target is a Case)."""

    kind: str  # BUILTIN | TARGET
    spec: str = ""  # the target ("file.py:NAME" / "pkg.mod:NAME"); unused for BUILTIN
    base_dir: str = ""  # relative file targets are taken from here
    pipeline: Pipeline | None = None  # re-target every case to this pipeline; None keeps the case's own
    names: tuple[str, ...] = ()  # BUILTIN: the scenario names
    smoke: bool = False  # BUILTIN: the codegen smoke's commit-graph-only variants

    def load(self) -> list[Case]:
        if self.kind == BUILTIN and self.smoke:
            return smoke_cases(self.names)
        if self.kind == BUILTIN:
            from compile_checks.scenarios import builtin_cases  # lazy: the scenarios import torch

            return builtin_cases(self.names or None, (self.pipeline or Pipeline.STOCK,))
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
    pipeline: Pipeline
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


def smoke_cases(names: Sequence[str]) -> list[Case]:
    """The codegen smoke: each scenario as one small graph (one layer, one step per chunk), stock.

    One step per chunk means every step commits and one layer means one region, so a single graph
    (the commit graph, whose generated code is the evidence) goes through the C++ build, run over the
    whole host loop with eviction and compared with eager; every verdict is already decided in
    analysis mode. Its cost is one g++ build (~8 s on the 2-core box; two 2-layer cases were ~24 s).
    """
    from compile_checks.scenarios import SCENARIOS, scenario_case  # lazy: the scenarios import torch

    return [scenario_case(dataclasses.replace(SCENARIOS[n], denoise_steps=1, num_layers=1)) for n in names]


def codegen_smoke_names() -> tuple[str, ...]:
    from compile_checks.scenarios import FULL_COMPILE_SMOKE  # lazy: the scenarios import torch

    return tuple(FULL_COMPILE_SMOKE)


def scenario_names() -> list[str]:
    from compile_checks.scenarios import SCENARIOS  # lazy: the scenarios import torch

    return list(SCENARIOS)


def _add_source(plan: GatePlan, source: CaseSource, *, analysis_only: bool, smoke: bool = False) -> None:
    cases = source.load()
    plan.preloaded[source] = cases
    for c in cases:
        label = c.name  # a built-in case's name is already labelled: split[vllm]
        if smoke:
            label += CODEGEN_SUFFIX
        elif source.kind == TARGET and source.pipeline is not None:
            label = pipeline_label(c.name, c.pipeline)  # one target, several pipelines
        plan.cases.append(PlannedCase(source, c.name, label, c.pipeline, c.expect_clean, analysis_only, smoke))


def plan_targets(specs: Sequence[str], base_dir: str | Path, pipelines: Sequence[Pipeline], *, mode: Mode) -> GatePlan:
    """The user's cases, once per pipeline in ``pipelines`` (or each under its own when empty)."""
    plan = GatePlan()
    for spec in specs:
        for pipeline in pipelines or (None,):
            _add_source(plan, CaseSource(TARGET, spec, str(base_dir), pipeline), analysis_only=mode.analysis_only)
    _check_unique(plan)
    return plan


def plan_builtin(scenarios: Sequence[str], pipelines: Sequence[Pipeline], *, mode: Mode) -> GatePlan:
    """The built-in gate (``scenarios`` empty) or the named scenarios, per pipeline.

    Unknown names raise ``ValueError`` listing the valid ones (before anything compiles).
    """
    valid = scenario_names()
    unknown = [n for n in scenarios if n not in valid]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
    plan = GatePlan()
    for pipeline in pipelines or (Pipeline.STOCK, Pipeline.VLLM):
        _add_source(
            plan, CaseSource(BUILTIN, pipeline=pipeline, names=tuple(scenarios)), analysis_only=mode.analysis_only
        )
    if mode.codegen_smoke and not scenarios:
        source = CaseSource(BUILTIN, pipeline=Pipeline.STOCK, names=codegen_smoke_names(), smoke=True)
        _add_source(plan, source, analysis_only=False, smoke=True)
    _check_unique(plan)
    return plan


def _check_unique(plan: GatePlan) -> None:
    seen: set[str] = set()
    dupes = sorted({p.label for p in plan.cases if p.label in seen or seen.add(p.label)})  # type: ignore[func-returns-value]
    if dupes:
        raise ValueError(f"duplicate case names in one gate run: {', '.join(dupes)}")


__all__ = [
    "BUILTIN",
    "CODEGEN_SUFFIX",
    "TARGET",
    "CaseSource",
    "GatePlan",
    "PlannedCase",
    "codegen_smoke_names",
    "plan_builtin",
    "plan_targets",
    "scenario_names",
    "smoke_cases",
]
