"""How a case is compiled: the stock ``torch.compile`` path, or vLLM's.

``pipeline_settings(name)`` gives the functionalization and Inductor config a pipeline
compiles with; ``compile_for_pipeline(check, fn, name, dynamic=)`` returns the compiled
callable, always through the check's instrumented backend so every region is observed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compile_checks.case import PIPELINES

if TYPE_CHECKING:
    from compile_checks.api import CloneCheck


@dataclass(frozen=True)
class PipelineSettings:
    """What a pipeline compiles with, before the case's own overrides."""

    functionalization: str
    inductor_config: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""


def pipeline_settings(name: str) -> PipelineSettings:
    if name not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}, got {name!r}")
    if name == "stock":
        return PipelineSettings(functionalization="v2", label="torch.compile, Inductor defaults")
    raise NotImplementedError(f"pipeline {name!r} is not implemented yet")


def compile_for_pipeline(check: CloneCheck, fn: Callable[..., Any], name: str, *, dynamic: bool = False) -> Callable[..., Any]:
    """The compiled callable for ``fn`` under pipeline ``name``, observed by ``check``."""
    if name not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}, got {name!r}")
    if name == "stock":
        return check.compile(fn, dynamic=dynamic)
    raise NotImplementedError(f"pipeline {name!r} is not implemented yet")


__all__ = ["PipelineSettings", "compile_for_pipeline", "pipeline_settings"]
