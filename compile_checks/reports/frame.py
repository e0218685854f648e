"""The traffic report as a pandas DataFrame, for a notebook or a script: :func:`traffic_frame`.

    from compile_checks.reports.frame import traffic_frame

    df = traffic_frame(targets=["engine_cases.py:gate"], pipelines=["stock", "vllm"])
    df[["case", "pipeline", "surviving_clones", "extra_bytes_per_step", "traffic_ratio"]]

The cases run as ``compile-checks report`` runs them (each through ``run_case``); the frame is the one
traffic.csv holds: one row per case and pipeline, ``case`` its label (``name[pipeline]`` under a
pipeline other than stock), only the columns some row has a value for, counts as integers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from compile_checks.errors import UsageError
from compile_checks.gate.targets import TargetError, load_targets
from compile_checks.pipelines.vllm_env import prepare_process_for_vllm
from compile_checks.reports.builtin import unknown_scenarios, with_pool_variants
from compile_checks.reports.planning import plan_runs, report_pipelines
from compile_checks.reports.tables import report_tables
from compile_checks.reports.traffic import DEFAULT_VIDEO_CHUNKS, tidy_table
from compile_checks.vocab import Mode


def traffic_frame(
    targets: Sequence[str] = (),
    scenarios: Sequence[str] = (),
    *,
    pipelines: Sequence[str] = (),
    full: bool = False,
    video_chunks: int = DEFAULT_VIDEO_CHUNKS,
    base_dir: str | Path | None = None,
) -> pd.DataFrame:
    """Run the cases and return the report's table (what traffic.csv holds).

    Args:
        targets: your cases, ``path/to/file.py:NAME`` or ``package.module:NAME`` (relative to ``base_dir``).
        scenarios: built-in scenarios by name (``compile-checks report --list``).
        pipelines: run every case under each of these (``stock``, ``vllm``, ``vllm-piecewise``); empty:
            ``[tool.compile_checks] pipelines`` of ``base_dir``'s pyproject.toml, else each case's own.
        full: compile fully (C++ codegen; adds Inductor's kernel-byte estimate); default analysis-only.
        video_chunks: the video length the per-video columns are for.
        base_dir: where relative targets and pyproject.toml are found (default: the working directory).

    Raises:
        UsageError: no case named, an unknown scenario, a bad target.
    """
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    if not targets and not scenarios:
        raise UsageError("traffic_frame needs targets or scenarios")
    prepare_process_for_vllm()  # before a target or the scenarios can import vLLM
    try:
        cases = load_targets(list(targets), base_dir=base) if targets else []
    except TargetError as e:
        raise UsageError(str(e)) from e
    from compile_checks.scenarios import SCENARIOS  # here: importing them imports vLLM (prepared above)

    registry = with_pool_variants(SCENARIOS)
    unknown = unknown_scenarios(list(scenarios), registry)
    if unknown:
        raise UsageError(f"unknown scenario(s): {', '.join(unknown)}")
    chosen, _ = report_pipelines(tuple(pipelines), base)
    runs = plan_runs([registry[n] for n in scenarios], cases, chosen)
    df, _ = report_tables(runs, Mode.FULL if full else Mode.ANALYSIS_ONLY, video_chunks)
    return tidy_table(df)


__all__ = ["traffic_frame"]
