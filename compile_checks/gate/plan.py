"""What one gate run checks: the cases, under which pipeline, with which expectation, in which mode.

A :class:`PlannedCase` names its case by *how to build it* (a :class:`~compile_checks.gate.sources.CaseSource`
plus the case's name), not by the object: a worker process (``--jobs``) rebuilds the case from that
description, and a zero-argument target factory gives fresh tensors per pipeline. Planning reads a
target's cases once; a :class:`~compile_checks.lazy_case.LazyCase` is not built to be planned (``list``).

Pipelines (:mod:`compile_checks.gate.sources`): a case with a per-pipeline ``expect_clean`` runs under
the pipelines it names (the gate's ``pipelines`` select among them); a case with one bool runs under its
own pipeline, or under each of the gate's. A user case's label carries its pipeline (``kv[vllm]``), so
two cases of one name on different pipelines are two rows.

Modes: the verdict (does a pool clone survive?) is decided on the post-grad graph
(``analysis_only``), which costs dynamo + AOT + the post-grad passes and no C++ codegen.
The built-in gate adds a small, explicit codegen smoke (``FULL_COMPILE_SMOKE``, shown as
``split[codegen]``) compiled fully and checked compiled == eager; :class:`~compile_checks.vocab.Mode`
(resolved once by the CLI) says which: ``ANALYSIS`` (smoke), ``ANALYSIS_ONLY`` (none), ``FULL`` (all).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compile_checks.case import pipeline_label
from compile_checks.gate.sources import BUILTIN, TARGET, CaseSource, runs_under
from compile_checks.gate.targets import Declared, declared_cases
from compile_checks.vocab import Mode, Pipeline

CODEGEN_SUFFIX = "[codegen]"


@dataclass(frozen=True)
class PlannedCase:
    source: CaseSource
    case_name: str  # the Case.name within its source
    label: str  # unique in the run: tables, JUnit test names, dump folders
    pipeline: Pipeline
    expect_clean: bool  # under ``pipeline``
    analysis_only: bool
    codegen_smoke: bool = False
    # the case's own pipeline when the gate's pipelines re-ran its single bool expectation under another
    retargeted_from: Pipeline | None = None
    floor: bool = False  # ``--floor``: also compile it the floor way, per region beside the check
    # ``--inductor-cache DIR``: also run it against the caches in DIR (compile_checks.gate.warm_cache)
    inductor_cache: str | None = None
    # ``--fail-on-program-copies``: the pool-sized buffers the program makes fail the case (Case field of that name)
    fail_on_program_copies: bool = False

    @property
    def group(self) -> str:
        """JUnit classname: ``<target>/<pipeline>`` (``builtin/<pipeline>`` for built-in cases)."""
        where = self.source.spec if self.source.kind == TARGET else BUILTIN
        return f"{where}/{self.pipeline}"


@dataclass
class GatePlan:
    cases: list[PlannedCase] = field(default_factory=list)
    # cases read while planning, handed to the in-process runner so nothing is read twice
    preloaded: dict[CaseSource, list[Declared]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def codegen_smoke_names() -> tuple[str, ...]:
    from compile_checks.scenarios import FULL_COMPILE_SMOKE  # lazy: the scenarios import torch

    return tuple(FULL_COMPILE_SMOKE)


def scenario_names() -> list[str]:
    from compile_checks.scenarios import SCENARIOS  # lazy: the scenarios import torch

    return list(SCENARIOS)


def _add(plan: GatePlan, source: CaseSource, cases: Sequence[Declared], *, analysis_only: bool) -> None:
    plan.preloaded[source] = list(cases)
    for c in cases:
        if source.kind == TARGET:
            pipeline = source.pipeline or c.pipeline
            label = pipeline_label(c.name, pipeline)
        else:  # a built-in case's name is already labelled: split[vllm]
            pipeline, label = c.pipeline, c.name + (CODEGEN_SUFFIX if source.smoke else "")
        moved = c.expected_pipelines is None and c.pipeline != pipeline
        plan.cases.append(
            PlannedCase(
                source,
                c.name,
                label,
                pipeline,
                c.expects_clean_on(pipeline),
                analysis_only,
                source.smoke,
                retargeted_from=c.pipeline if moved else None,
            )
        )


def _pipelines_of(c: Declared, wanted: tuple[Pipeline, ...], own_pipeline: bool) -> tuple[Pipeline, ...]:
    if own_pipeline:
        return (c.pipeline,)
    named = c.expected_pipelines
    if named is None:
        return wanted or (c.pipeline,)
    return tuple(p for p in (wanted or named) if p in named)


def _plan_target(
    plan: GatePlan, spec: str, base_dir: str, wanted: tuple[Pipeline, ...], own_pipeline: bool, analysis_only: bool
) -> None:
    cases = declared_cases(spec, base_dir)
    order: list[Pipeline] = list(wanted)
    first_use: dict[int, Pipeline] = {}  # each object read here runs once, under its first pipeline
    for c in cases:
        runs = _pipelines_of(c, wanted, own_pipeline)
        if c.expected_pipelines is not None and wanted and set(wanted) - set(runs):
            skipped = ", ".join(p for p in wanted if p not in runs)
            plan.notes.append(
                f"{spec}: {c.name} is not run under {skipped}: its expect_clean names only "
                f"{', '.join(c.expected_pipelines)}"
            )
        if runs:
            first_use[id(c)] = runs[0]
        order += [p for p in runs if p not in order]
    for pipeline in order:
        source = CaseSource(TARGET, spec, base_dir, pipeline, retarget=bool(wanted), own_pipeline=own_pipeline)
        mine = [c for c in cases if runs_under(c, pipeline, retarget=bool(wanted), own_pipeline=own_pipeline)]
        names = [c.name for c in mine]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(
                f"target {spec!r}: {len(names) - len(set(names))} more case(s) named {', '.join(dupes)} under the "
                f"{pipeline} pipeline; one name may appear once per pipeline (a bool expect_clean runs under each of "
                "the gate's pipelines: name a case's pipelines with an expect_clean mapping)"
            )
        _add(plan, source, mine, analysis_only=analysis_only)
        plan.preloaded[source] = [c for c in mine if first_use.get(id(c)) == pipeline]


def plan_targets(
    specs: Sequence[str],
    base_dir: str | Path,
    pipelines: Sequence[Pipeline | str],
    *,
    mode: Mode,
    own_pipeline: bool = False,
) -> GatePlan:
    """The user's cases under the gate's ``pipelines`` (module docstring); ``own_pipeline``: each case
    once, under its own ``pipeline`` (``dump`` without ``--pipeline``)."""
    plan = GatePlan()
    wanted = tuple(dict.fromkeys(Pipeline(p) for p in pipelines))
    for spec in specs:
        _plan_target(plan, spec, str(base_dir), wanted, own_pipeline and not wanted, mode.analysis_only)
    _check_unique(plan)
    return plan


def plan_builtin(scenarios: Sequence[str], pipelines: Sequence[Pipeline | str], *, mode: Mode) -> GatePlan:
    """The built-in gate (``scenarios`` empty) or the named scenarios, per pipeline.

    Unknown names raise ``ValueError`` listing the valid ones (before anything compiles).
    """
    valid = scenario_names()
    unknown = [n for n in scenarios if n not in valid]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
    plan = GatePlan()
    for pipeline in pipelines or (Pipeline.STOCK, Pipeline.VLLM):
        source = CaseSource(BUILTIN, pipeline=Pipeline(pipeline), names=tuple(scenarios))
        _add(plan, source, source.declared(), analysis_only=mode.analysis_only)
    if mode.codegen_smoke and not scenarios:
        source = CaseSource(BUILTIN, pipeline=Pipeline.STOCK, names=codegen_smoke_names(), smoke=True)
        _add(plan, source, source.declared(), analysis_only=False)
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
]
