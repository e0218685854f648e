"""Running the planned cases (:mod:`compile_checks.reports.planning`) into the report's row and node tables,
with a progress display: a bar on a terminal, a plain line per finished case in a CI log."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from compile_checks.gate.stderr_noise import terminal
from compile_checks.reports import run as report_run
from compile_checks.reports.measure import measure, scenario_measure_case
from compile_checks.reports.planning import PlannedRun
from compile_checks.vocab import Mode, Pipeline


def _dump_dir(dump_root: Path | None, name: str) -> str | None:
    folder = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)  # split[vllm] -> split_vllm_, as the gate's dump folders
    return str(dump_root / folder) if dump_root is not None else None


def _progress(
    total: int, enabled: bool
) -> tuple[Callable[[str], None], Callable[[str, float], None], Callable[[], None]]:
    """(starting, finished, close) on the real stderr: a tqdm bar on a terminal; elsewhere (a CI log)
    one plain line per finished case, flushed, with no carriage returns; nothing when not ``enabled``."""
    stream = terminal()
    if not enabled:
        return (lambda label: None), (lambda label, seconds: None), (lambda: None)
    if not stream.isatty():
        count = [0]

        def line(label: str, seconds: float) -> None:
            count[0] += 1
            print(f"report [{count[0]}/{total}] {label} {seconds:.1f} s", file=stream, flush=True)

        return (lambda label: None), line, (lambda: None)
    bar = tqdm(total=total, desc="report", unit="case", file=stream)
    return bar.set_postfix_str, (lambda label, seconds: bar.update(1)), bar.close


def report_tables(
    runs: list[PlannedRun],
    mode: Mode,
    video_chunks: int,
    *,
    progress: bool = False,
    dump_root: Path | None = None,
    rounds: int | None = None,
) -> tuple[Any, Any]:
    """Run every planned case (built-in and the user's, under their pipelines): the row and node tables.

    ``dump_root``: keep each case's dumps under ``dump_root/<label>``; ``rounds``: also time each case
    (``--measure``, that many interleaved rounds)."""
    # here, not at the top: pandas, the report extra's (checked first, in run_report)
    from compile_checks.reports import traffic as tr

    made_runs: list[tuple[PlannedRun, Any]] = []
    starting, finished, close = _progress(len(runs), progress)
    try:
        for planned in runs:
            starting(planned.label)
            t0 = time.perf_counter()
            dump = _dump_dir(dump_root, planned.label)
            done: Any
            if planned.scenario is not None:
                done = report_run.run_builtin(planned.scenario, mode, dump, Pipeline(planned.pipeline))
            else:
                done = report_run.run_for_report(planned.case, mode, dump)
            made_runs.append((planned, done))
            finished(planned.label, time.perf_counter() - t0)
    finally:
        close()
    ms: dict[str, float] = {}
    if rounds is not None:  # stock only: the timing harness compiles each case the stock way
        todo: list[tuple[Any, int | None]] = [
            scenario_measure_case(r.scenario) for r in runs if r.scenario is not None and r.pipeline == "stock"
        ]
        todo += [(r.case, None) for r in runs if r.case is not None]
        ms = measure(todo, rounds=rounds)
    made = [
        tr.traffic_row_and_nodes(
            done,
            video_chunks,
            ms_per_step=ms.get(planned.label, tr.NAN),
            analysis_only=mode.analysis_only,
        )
        if planned.scenario is not None
        else tr.case_row_and_nodes(done.result, done.calls, done.ideal, video_chunks, ms.get(planned.label, tr.NAN))
        for planned, done in made_runs
    ]
    return tr.traffic_table([row for row, _ in made]), tr.nodes_table([n for _, nodes in made for n in nodes])


__all__ = ["report_tables"]
