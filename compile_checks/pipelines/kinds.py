"""One object per pipeline: its settings, how it compiles a function, what it allows.

Every question that depends on the pipeline is a method or attribute here, asked through
:func:`pipeline_of`; no caller switches on :class:`~compile_checks.vocab.Pipeline` members. A new
pipeline is one subclass and one entry of :data:`PIPELINES`. vLLM is imported only by the vLLM
pipelines' methods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from compile_checks.vocab import Functionalization, Pipeline

if TYPE_CHECKING:
    from compile_checks.session import CloneCheck


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


class CompilePipeline:
    """A pipeline. Attributes: ``name``; ``default``: a case that names none runs it (its labels carry no
    ``[pipeline]`` suffix); ``engine_compile``: ``Case.compile`` (the engine's own compile step) combines
    with it; ``vllm_modules``: its default gate also holds vLLM's ``@support_torch_compile`` layer cases."""

    name: ClassVar[Pipeline]
    default: ClassVar[bool] = False
    engine_compile: ClassVar[bool] = True
    vllm_modules: ClassVar[bool] = False

    def settings(self) -> PipelineSettings:
        """The functionalization and Inductor config it compiles with, before a case's overrides."""
        raise NotImplementedError

    def compile(
        self, check: CloneCheck, fn: Callable[..., Any], *, dynamic: bool | None, fullgraph: bool, mode: str | None
    ) -> Callable[..., Any]:
        """``fn`` compiled through ``check``'s instrumented backend, as this pipeline compiles it."""
        raise NotImplementedError

    def around_engine(self, check: CloneCheck, fn: Callable[..., Any], compiled: Any) -> Any:
        """What the driver calls when the engine compiled itself (``Case.compile``): ``compiled`` as is."""
        return compiled

    def label(self, name: str) -> str:
        """``name`` on the default pipeline, ``name[vllm]`` on another (a name already labelled stays)."""
        return name if self.default or name.endswith(f"[{self.name}]") else f"{name}[{self.name}]"


class StockPipeline(CompilePipeline):
    """``torch.compile(backend=<the check's Inductor>)``, Inductor defaults, v2 functionalization."""

    name = Pipeline.STOCK
    default = True

    def settings(self) -> PipelineSettings:
        return PipelineSettings(Functionalization.V2, label="torch.compile, Inductor defaults")

    def compile(
        self, check: CloneCheck, fn: Callable[..., Any], *, dynamic: bool | None, fullgraph: bool, mode: str | None
    ) -> Callable[..., Any]:
        return check.compile(fn, dynamic=dynamic, fullgraph=fullgraph, mode=mode)


class VllmPipeline(CompilePipeline):
    """As vLLM 0.33 compiles on a CPU host: its ``VllmConfig``'s settings; ``@support_torch_compile``
    modules through vLLM's own wrapper (:mod:`compile_checks.pipelines.vllm`)."""

    name = Pipeline.VLLM
    vllm_modules = True
    _label: ClassVar[str] = "vLLM 0.33 CPU platform: torch.compile(inductor) with vLLM's CompilationConfig"

    def settings(self) -> PipelineSettings:
        from compile_checks.pipelines.vllm import vllm_settings  # lazy: the stock path never imports vLLM

        functionalization, inductor_config, notes = vllm_settings()
        return PipelineSettings(Functionalization(functionalization), inductor_config, self._label, notes)

    def compile(
        self, check: CloneCheck, fn: Callable[..., Any], *, dynamic: bool | None, fullgraph: bool, mode: str | None
    ) -> Callable[..., Any]:
        from compile_checks.pipelines.vllm import compile_vllm  # lazy: imports vLLM

        config = self.settings().inductor_config
        return compile_vllm(check, fn, config, dynamic=dynamic, fullgraph=fullgraph, mode=mode)

    def around_engine(self, check: CloneCheck, fn: Callable[..., Any], compiled: Any) -> Any:
        from compile_checks.pipelines.vllm import run_under_vllm  # lazy: imports vLLM

        return run_under_vllm(check, fn, compiled, self.settings().inductor_config)


class PiecewisePipeline(VllmPipeline):
    """A CPU *simulation* of vLLM's GPU path (:mod:`compile_checks.pipelines.piecewise`): ``VllmBackend``'s
    graph splitting and its ``PostGradPassManager``, each piece compiled and analysed by the check. It
    splits one graph of its own compile, so an engine's own compile step does not combine with it."""

    name = Pipeline.VLLM_PIECEWISE
    engine_compile = False
    _label = "CPU SIMULATION of vLLM's GPU path: VllmBackend graph splitting + PostGradPassManager"

    def compile(
        self, check: CloneCheck, fn: Callable[..., Any], *, dynamic: bool | None, fullgraph: bool, mode: str | None
    ) -> Callable[..., Any]:
        from compile_checks.pipelines.piecewise import compile_piecewise  # lazy: imports vLLM

        return compile_piecewise(check, fn, self.settings().inductor_config, dynamic=dynamic)

    def around_engine(self, check: CloneCheck, fn: Callable[..., Any], compiled: Any) -> Any:
        raise ValueError("Case.compile cannot be combined with the vllm-piecewise pipeline")


PIPELINES: dict[Pipeline, CompilePipeline] = {p.name: p for p in (StockPipeline(), VllmPipeline(), PiecewisePipeline())}
assert set(PIPELINES) == set(Pipeline), "every Pipeline member has its object"


def pipeline_of(pipeline: Pipeline | str) -> CompilePipeline:
    """The object of ``pipeline`` (a :class:`Pipeline` or its name, validated where it entered)."""
    return PIPELINES[Pipeline(pipeline)]


__all__ = [
    "PIPELINES",
    "CompilePipeline",
    "PiecewisePipeline",
    "PipelineSettings",
    "StockPipeline",
    "VllmPipeline",
    "pipeline_of",
]
