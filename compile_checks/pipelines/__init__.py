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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, assert_never

from compile_checks.vocab import Functionalization, Pipeline

if TYPE_CHECKING:
    from compile_checks.api import CloneCheck


@dataclass(frozen=True)
class PipelineSettings:
    """What a case compiles with: the pipeline's settings (with the case's overrides after ``resolve``).

    ``notes``: what was adapted when reading the pipeline's settings (e.g. an Inductor key
    vLLM sets that this torch does not know, dropped).
    """

    functionalization: Functionalization
    inductor_config: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    notes: tuple[str, ...] = ()


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
    if pipeline == Pipeline.STOCK:
        return PipelineSettings(Functionalization.V2, label="torch.compile, Inductor defaults")
    from compile_checks.pipelines.vllm import vllm_settings  # lazy: the stock path never imports vLLM

    functionalization, inductor_config, notes = vllm_settings()
    if pipeline == Pipeline.VLLM:
        label = "vLLM 0.33 CPU platform: torch.compile(inductor) with vLLM's CompilationConfig"
    else:
        label = "CPU SIMULATION of vLLM's GPU path: VllmBackend graph splitting + PostGradPassManager"
    return PipelineSettings(Functionalization(functionalization), inductor_config, label, notes)


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
    if engine_compile is not None:
        if pipeline == Pipeline.VLLM_PIECEWISE:  # the simulation splits one graph of its own compile
            raise ValueError("Case.compile cannot be combined with the vllm-piecewise pipeline")
        compiled: Any = engine_compile(check.backend)
        compiled = fn if compiled is None else compiled
        if not callable(compiled) and not (isinstance(compiled, (list, tuple)) and all(map(callable, compiled))):
            raise ValueError(
                f"Case.compile returned a {type(compiled).__name__}, expected a callable, a list of callables "
                "(the blocks a driver calls) or None"
            )
        if pipeline == Pipeline.VLLM:
            from compile_checks.pipelines.vllm import run_under_vllm  # lazy: imports vLLM

            return run_under_vllm(check, fn, compiled, pipeline_settings(pipeline).inductor_config)
        return compiled
    match pipeline:
        case Pipeline.STOCK:
            return check.compile(fn, dynamic=dynamic, fullgraph=fullgraph, mode=mode)
        case Pipeline.VLLM:
            from compile_checks.pipelines.vllm import compile_vllm  # lazy: imports vLLM

            return compile_vllm(
                check, fn, pipeline_settings(pipeline).inductor_config, dynamic=dynamic, fullgraph=fullgraph, mode=mode
            )
        case Pipeline.VLLM_PIECEWISE:
            from compile_checks.pipelines.piecewise import compile_piecewise  # lazy: imports vLLM

            return compile_piecewise(check, fn, pipeline_settings(pipeline).inductor_config, dynamic=dynamic)
        case _:
            assert_never(pipeline)


__all__ = [
    "CompileOptions",
    "EngineCompile",
    "PipelineSettings",
    "compile_for_pipeline",
    "pipeline_settings",
    "probe_cpu_isa",
    "resolve",
]
