"""What the report runs: each case under each pipeline, labelled as the gate labels it.

The pipelines are the gate's (:func:`report_pipelines`): ``--pipeline``, else ``[tool.compile_checks]
pipelines``, else each case's own; the report says which on its first line, never silently stock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compile_checks.case import pipeline_label
from compile_checks.errors import UsageError
from compile_checks.gate.config import ConfigError, load_config
from compile_checks.gate.sources import runs_under
from compile_checks.vocab import Pipeline


def project_config(directory: Path) -> Any:
    """``[tool.compile_checks]`` of ``directory/pyproject.toml`` (or of ``directory`` itself, a file: ``--config``;
    None: no file or no table), read and validated by the gate's own :func:`compile_checks.gate.config.load_config`."""
    try:
        return load_config(directory if directory.is_file() else directory / "pyproject.toml")
    except ConfigError as e:
        raise UsageError(str(e)) from e


def report_pipelines(chosen: Sequence[str], directory: Path) -> tuple[tuple[str, ...], str]:
    """The pipelines the report runs its cases under, and where they come from (said on stdout, never
    silently stock): ``--pipeline``, else the gate's ``[tool.compile_checks] pipelines``, else none
    (each case under its own pipeline; a built-in scenario's is stock)."""
    if chosen:
        return tuple(dict.fromkeys(chosen)), "--pipeline"
    config = project_config(directory)
    if config is not None and config.pipelines:
        return tuple(str(p) for p in config.pipelines), "[tool.compile_checks] pipelines"
    return (), "each case's own (built-in scenarios: stock); choose with --pipeline or [tool.compile_checks] pipelines"


@dataclass(frozen=True)
class PlannedRun:
    """One row to come: a built-in ``scenario`` or a user's ``case``, under ``pipeline``, labelled as the gate does."""

    label: str
    pipeline: str
    scenario: Any = None
    case: Any = None


def plan_runs(scenarios: list[Any], cases: list[Any], pipelines: tuple[str, ...]) -> list[PlannedRun]:
    """Every scenario and case under each pipeline (pipeline by pipeline, as the gate orders them); a
    user's case only where the gate would check it (:func:`compile_checks.gate.sources.runs_under`:
    an ``expect_clean`` mapping names its pipelines), re-targeted and labelled ``name[pipeline]``."""
    runs = [
        PlannedRun(pipeline_label(s.name, Pipeline(p)), p, scenario=s)
        for p in pipelines or ("stock",)
        for s in scenarios
    ]
    for p in pipelines or (None,):
        for c in cases:
            if p is None:  # no pipelines chosen: the case's own
                runs.append(PlannedRun(c.name, str(c.pipeline), case=c))
            elif runs_under(c, Pipeline(p), retarget=True):
                label = pipeline_label(c.name, Pipeline(p))
                moved = c if c.pipeline == p else c.replace(pipeline=Pipeline(p))
                runs.append(PlannedRun(label, p, case=moved if label == c.name else moved.replace(name=label)))
    return runs


__all__ = ["PlannedRun", "plan_runs", "project_config", "report_pipelines"]
