"""The built-in gate's cases declared, not built: a :class:`~compile_checks.lazy_case.LazyCase` per case,
named and expected from the registry, built (model, pools, host loop, vLLM) only when it runs.

Why: planning used to build every case of the gate, which imports the host loop and vLLM (~4 s of
the gate's start on the 2-core box); a ``--jobs`` worker, its imports done, waited for that plan
before its first case, then built all cases of a pipeline again to run one of them. Declared here,
the plan costs the registry's import, and ``LazyCase.materialize`` still checks each built case
against its declaration (name, expectation, pipeline).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Protocol

from compile_checks.case import Case, pipeline_label
from compile_checks.lazy_case import LazyCase
from compile_checks.pipelines import pipeline_of
from compile_checks.scenarios.registry import DEFAULT_GATE, SCENARIOS, VLLM_MODULE_CASES, scenario
from compile_checks.vocab import Pipeline


def _scenario_case(name: str, pipeline: Pipeline) -> Case:
    from compile_checks.scenarios.cases import scenario_case  # lazy: imports the host loop and vLLM

    return scenario_case(SCENARIOS[name], pipeline)


def _smoke_case(name: str) -> Case:
    """The codegen smoke's variant: one layer, one step per chunk, stock.

    One step per chunk means every step commits and one layer means one region, so a single graph
    (the commit graph, whose generated code is the evidence) goes through the C++ build, run over the
    whole host loop with eviction and compared with eager; every verdict is already decided in
    analysis mode. Its cost is one graph's g++ builds (~5 s on the 2-core box; two 2-layer cases were ~24 s).
    """
    from compile_checks.scenarios.cases import scenario_case  # lazy: imports the host loop and vLLM

    return scenario_case(dataclasses.replace(SCENARIOS[name], denoise_steps=1, num_layers=1))


def _module_case(fused: bool, pipeline: Pipeline) -> Case:
    from compile_checks.scenarios.vllm_module import vllm_module_case  # lazy: imports vLLM, registers an op

    return vllm_module_case(fused, pipeline=pipeline)


class _Declaration(Protocol):
    """What a declaration reads from a registry entry (a ``Scenario``, a ``ModuleCaseSpec``)."""

    @property
    def name(self) -> str: ...
    @property
    def expect_clean(self) -> bool: ...
    @property
    def description(self) -> str: ...


def _declared(spec: _Declaration, pipeline: Pipeline, build: Callable[[], Case], *, prefix: str = "") -> LazyCase:
    """``spec`` on ``pipeline`` (labelled ``name[vllm]`` off stock), built by ``build`` when it runs."""
    label = pipeline_label(spec.name, pipeline)
    description = prefix + spec.description
    return LazyCase(label, build, expect_clean=spec.expect_clean, pipeline=pipeline, description=description)


def declared_builtin(names: Sequence[str], pipeline: Pipeline) -> list[LazyCase]:
    """The named scenarios under ``pipeline`` (none named: the default gate, which under a vLLM pipeline
    also holds the ``@support_torch_compile`` layer cases); unknown names raise ``KeyError`` listing the valid."""
    declared = [
        _declared(s, pipeline, functools.partial(_scenario_case, s.name, pipeline))
        for s in (scenario(n) for n in names or DEFAULT_GATE)
    ]
    if not names and pipeline_of(pipeline).vllm_modules:
        declared += [
            _declared(m, pipeline, functools.partial(_module_case, m.fused, pipeline)) for m in VLLM_MODULE_CASES
        ]
    return declared


def declared_smoke(names: Sequence[str]) -> list[LazyCase]:
    """The codegen smoke's cases (:func:`_smoke_case`), stock, under their scenario names."""
    return [
        _declared(s, Pipeline.STOCK, functools.partial(_smoke_case, s.name), prefix="codegen smoke: ")
        for s in (scenario(n) for n in names)
    ]


__all__ = ["declared_builtin", "declared_smoke"]
