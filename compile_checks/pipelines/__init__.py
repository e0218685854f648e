"""How a case is compiled: the stock ``torch.compile`` path, or vLLM's.

``pipeline_settings(name)`` gives the functionalization and Inductor config a pipeline
compiles with; ``compile_for_pipeline(check, fn, name, dynamic=)`` returns the compiled
callable, always through the check's instrumented backend so every region is observed.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compile_checks.vocab import PIPELINES

if TYPE_CHECKING:
    from compile_checks.api import CloneCheck


@dataclass(frozen=True)
class PipelineSettings:
    """What a pipeline compiles with, before the case's own overrides.

    ``notes``: what was adapted when reading the pipeline's settings (e.g. an Inductor key
    vLLM sets that this torch does not know, dropped).
    """

    functionalization: str
    inductor_config: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    notes: tuple[str, ...] = ()


def _require_pipeline(name: str) -> None:
    if name not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}, got {name!r}")


def pipeline_settings(name: str) -> PipelineSettings:
    """The functionalization and Inductor config pipeline ``name`` compiles with."""
    _require_pipeline(name)
    if name == "stock":
        return PipelineSettings(functionalization="v2", label="torch.compile, Inductor defaults")
    from compile_checks.pipelines.vllm import vllm_settings

    functionalization, inductor_config, notes = vllm_settings()
    if name == "vllm":
        label = "vLLM 0.33 CPU platform: torch.compile(inductor) with vLLM's CompilationConfig"
    else:
        label = "CPU SIMULATION of vLLM's GPU path: VllmBackend graph splitting + PostGradPassManager"
    return PipelineSettings(functionalization, inductor_config, label, notes)


def compile_for_pipeline(
    check: CloneCheck, fn: Callable[..., Any], name: str, *, dynamic: bool = False
) -> Callable[..., Any]:
    """The compiled callable for ``fn`` under pipeline ``name``, observed by ``check``."""
    _require_pipeline(name)
    if name == "stock":
        return check.compile(fn, dynamic=dynamic)
    settings = pipeline_settings(name)
    if name == "vllm":
        from compile_checks.pipelines.vllm import compile_vllm

        return compile_vllm(check, fn, settings.inductor_config, dynamic=dynamic)
    from compile_checks.pipelines.piecewise import compile_piecewise

    return compile_piecewise(check, fn, settings.inductor_config, dynamic=dynamic)


__all__ = ["PipelineSettings", "compile_for_pipeline", "pipeline_settings"]
