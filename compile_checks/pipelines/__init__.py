"""How a case is compiled: the stock ``torch.compile`` path, or vLLM's.

``pipeline_settings(pipeline)`` gives the functionalization and Inductor config a pipeline
compiles with; ``resolve(case)`` adds the case's own overrides (every caller that compiles a
case takes its settings from there); ``compile_for_pipeline(check, fn, pipeline, dynamic=)``
returns the compiled callable, always through the check's instrumented backend so every
region is observed. Functions take a :class:`~compile_checks.vocab.Pipeline`: a name is
validated where it enters (``Case``, the CLI), not here.

* ``"stock"``: ``torch.compile(backend=<the check's Inductor>)``, Inductor defaults, v2.
* ``"vllm"``: as vLLM 0.33 compiles on a CPU host (:mod:`compile_checks.pipelines.vllm`):
  the settings are read from vLLM's own ``VllmConfig``; ``@support_torch_compile``
  modules go through vLLM's wrapper.
* ``"vllm-piecewise"``: a CPU *simulation* of vLLM's GPU path
  (:mod:`compile_checks.pipelines.piecewise`): ``VllmBackend``'s graph splitting and its
  ``PostGradPassManager``, each piece compiled and analysed by the check.

vLLM is imported only when a vllm pipeline is used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from compile_checks.pipelines.kinds import PIPELINES, CompilePipeline, PipelineSettings, pipeline_of
from compile_checks.vocab import Functionalization, Pipeline

if TYPE_CHECKING:
    from compile_checks.session import CloneCheck


class CompileOptions(Protocol):
    """What :func:`resolve` reads of a case (``compile_checks.case.Case`` has it)."""

    @property
    def pipeline(self) -> Pipeline: ...

    @property
    def functionalization(self) -> Functionalization | None: ...

    @property
    def inductor_config(self) -> Mapping[str, Any]: ...


def pipeline_settings(pipeline: Pipeline) -> PipelineSettings:
    """The functionalization and Inductor config ``pipeline`` compiles with, before a case's overrides."""
    return pipeline_of(pipeline).settings()


def resolve(case: CompileOptions) -> PipelineSettings:
    """The settings ``case`` compiles with: its pipeline's, with the case's functionalization (when
    set) and its ``inductor_config`` patches on top."""
    base = pipeline_settings(case.pipeline)
    return dataclasses.replace(
        base,
        functionalization=case.functionalization or base.functionalization,
        inductor_config={**base.inductor_config, **dict(case.inductor_config)},
    )


# the engine's own compile step: receives the check's dynamo backend, returns what the driver calls
# (or None when it compiled the model's parts in place, e.g. per block, and the driver calls ``fn``; or the
# list of compiled blocks the driver calls)
EngineCompile = Callable[[Callable[..., Any]], "Callable[..., Any] | Sequence[Callable[..., Any]] | None"]


def probe_cpu_isa() -> None:
    """Inductor's CPU vector-ISA probe, run outside any compile's fresh cache folder
    (:func:`compile_checks.check.settle.probe_cpu_isa` says why). Lazy: this module stays torch-free."""
    from compile_checks.check.settle import probe_cpu_isa as probe

    probe()


def compile_for_pipeline(
    check: CloneCheck,
    fn: Callable[..., Any],
    pipeline: Pipeline,
    *,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    mode: str | None = None,
    engine_compile: EngineCompile | None = None,
) -> Callable[..., Any]:
    """The compiled callable for ``fn`` under ``pipeline``, observed by ``check``.

    ``engine_compile`` (``Case.compile``) replaces the plain ``torch.compile(fn)``: the engine
    compiles the way it does in production (per block, regionally) with ``check.backend``.
    """
    if not check.probe.analysis_only:  # C++ codegen will run: probe the CPU outside the fresh cache
        probe_cpu_isa()
    chosen = pipeline_of(pipeline)
    if engine_compile is None:
        return chosen.compile(check, fn, dynamic=dynamic, fullgraph=fullgraph, mode=mode)
    if not chosen.engine_compile:  # e.g. the piecewise simulation splits one graph of its own compile
        raise ValueError(f"Case.compile cannot be combined with the {chosen.name} pipeline")
    compiled: Any = engine_compile(check.backend)
    compiled = fn if compiled is None else compiled
    if not callable(compiled) and not (isinstance(compiled, (list, tuple)) and all(map(callable, compiled))):
        raise ValueError(
            f"Case.compile returned a {type(compiled).__name__}, expected a callable, a list of callables "
            "(the blocks a driver calls) or None"
        )
    return chosen.around_engine(check, fn, compiled)


__all__ = [
    "PIPELINES",
    "CompileOptions",
    "CompilePipeline",
    "EngineCompile",
    "PipelineSettings",
    "compile_for_pipeline",
    "pipeline_of",
    "pipeline_settings",
    "probe_cpu_isa",
    "resolve",
]
