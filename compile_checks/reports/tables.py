"""Running the planned cases (:mod:`compile_checks.reports.planning`) into the report's row and node tables,
with a progress display: a bar on a terminal, a plain line per finished case in a CI log."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
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


def model_key(case: Any, calls: int) -> tuple[object, ...]:
    """Which model (at which size) a user's case runs, for one ideal per model: ``case.meta["model"]`` when the
    case names it; else its compiled callable (an ``nn.Module``'s class, a function's qualified name), the bytes
    of its pools' storages and its number of calls: the layouts of one model at one size. Both with the pipeline."""
    meta = case.meta if isinstance(case.meta, Mapping) else {}
    if meta.get("model"):
        return str(meta["model"]), str(case.pipeline)
    fn = case.fn
    name = type(fn).__qualname__ if hasattr(fn, "forward") else getattr(fn, "__qualname__", type(fn).__qualname__)
    seen: dict[int, int] = {}
    for t in case.pools.values() if isinstance(case.pools, Mapping) else ():
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return str(name), str(case.pipeline), sum(seen.values()), calls


def one_ideal_per_model(done: list[Any]) -> None:
    """The layouts of one model move the same data at best: each graph-derived ideal becomes the model's least
    per call (a layout that copies reads its copies too, and would be measured against an inflated ideal).
    Only a run the check passed apart from its copies can be that least: one with a failing finding (a lost
    write: its graph moves less than the engine must) or an undecided check is never the model's ideal.
    ``done``: :class:`compile_checks.reports.run.ReportRun` of the user's cases, changed in place."""
    groups: dict[tuple[object, ...], list[Any]] = {}
    for r in done:
        if r.ideal[0] is not None and r.ideal[1] == "graph" and r.calls > 0:
            groups.setdefault(model_key(r.result.case, r.calls), []).append(r)
    for runs in groups.values():
        sound = [r for r in runs if not r.result.report.problems]
        if len(runs) < 2 or not sound:
            continue
        best = min(sound, key=lambda r: r.ideal[0] / r.calls)
        per_call = best.ideal[0] / best.calls
        for r in runs:
            r.ideal = (
                round(per_call * r.calls),
                f"graph, one per model (least of its {len(runs)} cases: {best.result.case.name})",
            )


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
    one_ideal_per_model([done for planned, done in made_runs if planned.scenario is None])
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
