"""``compile-checks report``: the traffic report (its options, mode and exit codes: :mod:`compile_checks.cli`).

Writes traffic.csv / traffic_nodes.csv / traffic.md / traffic.html / traffic.png for the user's
cases (TARGETs, else ``[tool.compile_checks] targets`` of ./pyproject.toml) or the built-in
scenarios (``--scenario``, or when there are no targets). Every case runs through ``run_case``
(:mod:`compile_checks.reports.run`), in the mode the CLI resolved: analysis-only verdicts unless
``Mode.FULL``. Everything wrong with the request raises ``UsageError`` (exit 2) or
``UnwritableOutput`` (exit 3) before anything compiles; a case that fails returns
``ExitCode.COMPILE`` (4) and growth against ``--baseline`` ``ExitCode.NOT_MET`` (1).
"""

from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compile_checks.errors import UnwritableOutput, UsageError
from compile_checks.gate.outdir import writable_dir_problem
from compile_checks.gate.stderr_noise import terminal
from compile_checks.gate.targets import TargetError, load_targets
from compile_checks.pipelines.vllm_env import prepare_process_for_vllm
from compile_checks.reports.builtin import (
    default_scenario_names,
    unknown_scenarios,
    with_pool_variants,
)
from compile_checks.reports.measure import DEFAULT_ROUNDS
from compile_checks.reports.planning import plan_runs, project_config, report_pipelines
from compile_checks.reports.tables import report_tables
from compile_checks.vocab import ExitCode, Mode

REPORT_EXTRA: tuple[str, ...] = ("pandas", "matplotlib", "tabulate", "tqdm")


@dataclass(frozen=True)
class ReportRequest:
    """The report's command line, resolved (``mode`` by :func:`compile_checks.cli.resolve_mode`)."""

    mode: Mode
    out: Path | None = None
    targets: tuple[str, ...] = ()
    scenarios: tuple[str, ...] = ()
    pipelines: tuple[str, ...] = ()  # empty: [tool.compile_checks] pipelines, else each case's own
    baseline: Path | None = None
    write_baseline: Path | None = None
    video_chunks: int | None = None
    bench: Path | None = None
    measure: bool = False
    rounds: int | None = None
    dumps: bool = False
    progress: bool = True
    list_scenarios: bool = False
    config: Path | None = None  # [tool.compile_checks] from this file (default ./pyproject.toml)
    json: bool = False  # the document on stdout, everything else on stderr
    junitxml: Path | None = None


def _err(msg: str) -> None:
    print(f"error: {msg}", file=terminal())  # the real stderr, also while torch's is held


def _say(req: ReportRequest, text: str) -> None:
    """The report's own lines: stdout, or the real stderr when stdout carries the ``--json`` document."""
    print(text, file=terminal() if req.json else sys.stdout, flush=True)


def _project(req: ReportRequest) -> Path:
    """Where ``[tool.compile_checks]`` is read: ``--config`` (a file that must exist), else the working folder."""
    if req.config is None:
        return Path.cwd()
    if not req.config.is_file():
        raise UsageError(f"--config {req.config}: no such file")
    return req.config


def check_writable(out: Path) -> None:
    """Raise UnwritableOutput unless ``out`` can be created and written (checked before any compile)."""
    problem = writable_dir_problem(out)
    if problem is not None:
        raise UnwritableOutput(f"output directory: {problem}")


def pyproject_targets(directory: Path) -> tuple[list[str], Path] | None:
    """``[tool.compile_checks] targets`` of ``directory/pyproject.toml`` (None: no file or no key)."""
    config = project_config(directory)
    if config is None or not config.targets:
        return None
    return list(config.targets), config.base_dir


def missing_dependencies() -> list[str]:
    """The ``[reports]`` extra's packages that are not importable."""
    return [m for m in REPORT_EXTRA if importlib.util.find_spec(m) is None]


def _load_cases(req: ReportRequest) -> list[Any]:
    prepare_process_for_vllm()  # before a target or the scenarios can import vLLM (CPU-only host: CPU platform)
    found = (
        (list(req.targets), Path.cwd())
        if req.targets
        else (None if req.scenarios else pyproject_targets(_project(req)))
    )
    if not found:
        return []
    try:
        return load_targets(found[0], base_dir=found[1])
    except TargetError as e:
        raise UsageError(str(e)) from e


def _validate(req: ReportRequest) -> dict[str, Any]:
    """Everything that can be wrong with the request itself, checked before any compile."""
    # here, not at the top: these import pandas, which the report extra may lack (checked first)
    from compile_checks.reports import baseline as bl
    from compile_checks.reports.plot import BenchCsvError, load_bench_csv
    from compile_checks.reports.traffic import DEFAULT_VIDEO_CHUNKS

    got: dict[str, Any] = {"video_chunks": DEFAULT_VIDEO_CHUNKS if req.video_chunks is None else req.video_chunks}
    if got["video_chunks"] < 1:
        raise UsageError(f"--video-chunks must be >= 1, got {got['video_chunks']}")
    if req.rounds is not None and (req.rounds < 1 or not req.measure):
        raise UsageError("--rounds needs --measure and must be >= 1")
    try:
        got["baseline"] = bl.load_baseline(req.baseline) if req.baseline is not None else None
        got["bench"] = load_bench_csv(req.bench) if req.bench is not None else None
    except (bl.BaselineError, BenchCsvError) as e:
        raise UsageError(str(e)) from e
    return got


def run_report(req: ReportRequest) -> ExitCode:
    """Validate, run every case through ``run_case``, write the files, compare with the baseline."""
    missing = missing_dependencies()
    if missing:
        raise UsageError(
            f"the report needs {', '.join(missing)}: install the [reports] extra of ar-compile-checks (from a "
            f"checkout: pip install './ar-compile-checks[reports]'), or pip install {' '.join(missing)}"
        )
    got = _validate(req)
    _project(req)  # a missing --config file: exit 2 before anything loads
    cases = _load_cases(req)
    # here, not at the top: importing the scenarios imports vLLM (after _load_cases prepared the process)
    from compile_checks.scenarios import DEFAULT_GATE, SCENARIOS

    registry = with_pool_variants(SCENARIOS)
    default = default_scenario_names(registry, DEFAULT_GATE)
    if req.list_scenarios:
        for name, sc in registry.items():
            _say(req, f"{'*' if name in default else ' '} {name:24} {getattr(sc, 'description', '')}")
        return ExitCode.CLEAN
    if req.out is None:
        raise UsageError("--out DIR is required")
    names = list(req.scenarios) if req.scenarios else ([] if cases else default)
    unknown = unknown_scenarios(names, registry)
    if unknown:
        raise UsageError(f"unknown scenario(s): {', '.join(unknown)}; valid: {', '.join(sorted(registry))}")
    check_writable(req.out)
    for path in (req.write_baseline, req.junitxml):
        if path is not None:
            check_writable(path.parent)
    pipelines, where = report_pipelines(req.pipelines, _project(req))
    _say(req, f"report: pipelines {', '.join(pipelines) or '-'} ({where})")
    runs = plan_runs([registry[n] for n in names], cases, pipelines)
    if not runs:
        raise UsageError(f"nothing to report: no case runs under the pipelines {', '.join(pipelines)}")
    started = time.perf_counter()
    try:
        df, nodes = report_tables(
            runs,
            req.mode,
            got["video_chunks"],
            progress=req.progress,
            dump_root=req.out / "dumps" if req.dumps else None,
            rounds=(req.rounds or DEFAULT_ROUNDS) if req.measure else None,
        )
    except Exception as e:
        _err(f"a case failed: {type(e).__name__}: {e}")
        try:
            (req.out / "error.txt").write_text("".join(traceback.format_exception(e)))
            print(f"report: full traceback in {req.out / 'error.txt'}", file=terminal())
        except OSError:
            pass
        _ci_outputs(req, None, None, ExitCode.COMPILE, started, error=f"{type(e).__name__}: {e}")
        return ExitCode.COMPILE
    return _finish(req, got, df, nodes, started)


def _ci_outputs(
    req: ReportRequest, df: Any, cmp: Any, code: ExitCode, started: float, error: str | None = None
) -> ExitCode:
    """``--junitxml`` and ``--json`` (:mod:`compile_checks.reports.ci_outputs`); returns ``code``."""
    from compile_checks.reports import ci_outputs

    seconds = time.perf_counter() - started
    if req.junitxml is not None:
        try:
            ci_outputs.write_junit(req.junitxml, df, seconds=seconds, cmp=cmp, error=error)
        except OSError as e:
            raise UnwritableOutput(f"cannot write --junitxml {req.junitxml}: {e}") from e
    if req.json:
        doc = ci_outputs.json_document(
            df, exit_code=int(code), seconds=seconds, cmp=cmp, baseline=req.baseline, error=error
        )
        print(doc, flush=True)
    return code


def _finish(req: ReportRequest, got: dict[str, Any], df: Any, nodes: Any, started: float) -> ExitCode:
    # here, not at the top: both import pandas, the report extra's (checked first, in run_report)
    from compile_checks.reports import baseline as bl
    from compile_checks.reports.outputs import write_outputs

    assert req.out is not None
    entries = {
        str(r["case"]): bl.BaselineEntry(int(r["surviving_clones"]), float(r["extra_bytes_per_step"]))
        for _, r in df.iterrows()
    }
    try:
        write_outputs(df, nodes, req.out, got["video_chunks"], got["bench"])
        if req.write_baseline is not None:
            req.write_baseline.write_text(bl.dump_baseline(entries))
    except OSError as e:
        raise UnwritableOutput(f"cannot write the report: {e}") from e
    for v in df["verdict"]:
        _say(req, v)
    _say(
        req,
        f"report: {len(df)} case(s) in {time.perf_counter() - started:.1f} s; "
        f"wrote {req.out}/traffic{{.csv,_nodes.csv,.md,.html,.png}}",
    )
    if req.write_baseline is not None:
        _say(req, f"report: baseline written to {req.write_baseline}")
    if got["baseline"] is None:
        return _ci_outputs(req, df, None, ExitCode.CLEAN, started)
    cmp = bl.compare(got["baseline"], entries)
    for name in cmp.new_scenarios:
        _say(req, f"baseline: {name} is new (not in {req.baseline}), not compared")
    for name in cmp.improved:
        _say(req, f"baseline: {name} improved (fewer clones or bytes); consider --write-baseline")
    if not cmp.ok:
        for r in cmp.regressions:
            print(f"baseline: REGRESSION {r.describe()}", file=terminal())
        return _ci_outputs(req, df, cmp, ExitCode.NOT_MET, started)
    _say(req, f"baseline: ok, nothing grew against {req.baseline}")
    return _ci_outputs(req, df, cmp, ExitCode.CLEAN, started)


__all__ = ["ReportRequest", "check_writable", "missing_dependencies", "pyproject_targets", "run_report"]
