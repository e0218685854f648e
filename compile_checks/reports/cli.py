"""``compile-checks report`` / ``python -m compile_checks.reports``: the traffic report.

Writes traffic.csv / traffic_nodes.csv / traffic.md / traffic.html / traffic.png for
the user's cases (``--target``, else ``[tool.compile_checks] targets`` of
./pyproject.toml) or the built-in scenarios (``--scenario``, or when there are no
targets). Verdicts come from the post-grad graph (no C++ codegen) unless ``--full``.

Exit codes: 0 ok; 1 a case's clones or extra bytes grew against ``--baseline``;
2 bad arguments (unknown scenario, bad target, unreadable or invalid baseline or
bench CSV), all checked before anything compiles; 3 the output cannot be written;
4 a case failed to run.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from compile_checks.reports.builtin import (  # noqa: F401  (re-exported: the CLI's names)
    POOL_VARIANTS,
    PREFERRED_DEFAULT,
    default_scenario_names,
    pool_variant_name,
    unknown_scenarios,
    with_pool_variants,
)

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_UNWRITABLE, EXIT_RUN_FAILED = 0, 1, 2, 3, 4
PROG = "compile-checks report"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="output directory (created if missing); required unless --list")
    p.add_argument("--target", action="append", default=None, metavar="TARGET",
                   help="your cases: path/to/file.py:NAME or package.module:NAME (repeatable)")
    p.add_argument("--scenario", action="append", default=None, metavar="NAME",
                   help="built-in scenario (repeatable); default without targets: the traffic set")
    p.add_argument("--baseline", type=Path, help="baseline JSON to compare against; exit 1 on growth")
    p.add_argument("--write-baseline", type=Path, metavar="FILE", help="write this run as a baseline JSON")
    p.add_argument("--video-chunks", type=int, default=None, help="video length in chunks (default 60)")
    p.add_argument("--bench", type=Path, metavar="CSV", help="reports.bench CSV: adds its timing panel")
    p.add_argument("--measure", action="store_true",
                   help="also compile fully and time each case (ms_per_step, interleaved medians)")
    p.add_argument("--rounds", type=int, default=None, help="--measure: interleaved rounds (default 7)")
    p.add_argument("--full", action="store_true",
                   help="compile fully (C++ codegen) for the verdicts; adds Inductor's kernel-byte estimate")
    p.add_argument("--analysis-only", action="store_true", help="the default (kept for old command lines)")
    p.add_argument("--dumps", action="store_true", help="keep the graph dumps under OUT/dumps/NAME")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true", help="list the built-in scenario names (default set marked)")
    return p


def _err(msg: str) -> None:
    print(f"report: error: {msg}", file=sys.stderr)


class UsageError(ValueError):
    """A bad argument, target, baseline or bench CSV: exit 2, before anything compiles."""


def check_writable(out: Path) -> str | None:
    """None if ``out`` can be created and written, else why not (checked before any compile)."""
    from compile_checks.gate.outdir import writable_dir_problem

    problem = writable_dir_problem(out)
    return None if problem is None else f"output directory: {problem}"


def pyproject_targets(directory: Path) -> tuple[list[str], Path] | None:
    """``[tool.compile_checks] targets`` of ``directory/pyproject.toml`` (None: no file or no key),
    read and validated by the gate's own :func:`compile_checks.gate.config.load_config`."""
    from compile_checks.gate.config import ConfigError, load_config

    try:
        config = load_config(directory / "pyproject.toml")
    except ConfigError as e:
        raise UsageError(str(e)) from e
    if config is None or not config.targets:
        return None
    return list(config.targets), config.base_dir


def _load_cases(args: argparse.Namespace) -> list[Any]:
    from compile_checks.pipelines.vllm_env import prepare_process_for_vllm
    from compile_checks.gate.targets import TargetError, load_targets

    prepare_process_for_vllm()  # before a target can import vLLM (CPU-only host: the CPU platform)

    found = (args.target, Path.cwd()) if args.target else (None if args.scenario else pyproject_targets(Path.cwd()))
    if not found:
        return []
    try:
        return load_targets(found[0], base_dir=found[1])
    except TargetError as e:
        raise UsageError(str(e)) from e


def _validate(args: argparse.Namespace) -> dict[str, Any]:
    """Everything that can be wrong with the command line, checked before any compile."""
    from compile_checks.reports import baseline as bl
    from compile_checks.reports.plot import BenchCsvError, load_bench_csv
    from compile_checks.reports.traffic import DEFAULT_VIDEO_CHUNKS

    got: dict[str, Any] = {"video_chunks": DEFAULT_VIDEO_CHUNKS if args.video_chunks is None else args.video_chunks}
    if got["video_chunks"] < 1:
        raise UsageError(f"--video-chunks must be >= 1, got {got['video_chunks']}")
    if args.rounds is not None and (args.rounds < 1 or not args.measure):
        raise UsageError("--rounds needs --measure and must be >= 1")
    try:
        got["baseline"] = bl.load_baseline(args.baseline) if args.baseline is not None else None
        got["bench"] = load_bench_csv(args.bench) if args.bench is not None else None
    except (bl.BaselineError, BenchCsvError) as e:
        raise UsageError(str(e)) from e
    return got


def _builtin_registry() -> tuple[dict[str, Any], list[str], Any]:
    from compile_checks.scenarios import DEFAULT_GATE, SCENARIOS, run_scenario

    registry = with_pool_variants(SCENARIOS)
    return registry, default_scenario_names(registry, DEFAULT_GATE), run_scenario


def _run_builtin(scenarios: Sequence[Any], run_scenario: Any, args: argparse.Namespace, bar: Any) -> list[Any]:
    results = []
    for s in scenarios:
        bar.set_postfix_str(s.name)
        dump_dir = str(args.out / "dumps" / s.name) if args.dumps else None
        results.append(run_scenario(s, dump_dir=dump_dir, analysis_only=not args.full))
        bar.update(1)
    return results


def _run_targets(cases: Sequence[Any], args: argparse.Namespace, bar: Any) -> list[tuple[Any, int, Any]]:
    """(CaseResult, calls of the compiled function, derived ideal) per case."""
    from compile_checks.case import run_case
    from compile_checks.reports.ideal import case_ideal_per_run, ideal_bytes_per_run, record_final_graphs
    from compile_checks.reports.measure import CallCounter

    out = []
    for case in cases:
        bar.set_postfix_str(case.name)
        counters: list[CallCounter] = []

        def driver(compiled: Any, case: Any = case) -> Any:
            counters.append(CallCounter(compiled))
            if case.driver is not None:
                return case.driver(counters[-1])
            return counters[-1](*case.args, **dict(case.kwargs))

        dump_dir = str(args.out / "dumps" / case.name) if args.dumps else None
        with record_final_graphs() as graphs:
            result = run_case(case.replace(driver=driver), analysis_only=not args.full, dump_dir=dump_dir)
        result.case = case
        calls = sum(c.calls for c in counters)
        report = result.report
        derived = ideal_bytes_per_run(graphs, report.region_calls, report.num_regions)
        out.append((result, calls, case_ideal_per_run(case.ideal_bytes_per_call, calls, derived)))
        bar.update(1)
    return out


def missing_dependencies() -> list[str]:
    """The ``[reports]`` extra's packages that are not importable."""
    import importlib.util

    return [m for m in ("pandas", "matplotlib", "tabulate", "tqdm") if importlib.util.find_spec(m) is None]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    missing = missing_dependencies()
    if missing:
        _err(f"the report needs {', '.join(missing)}: pip install 'compile-checks[reports]'")
        return EXIT_USAGE
    try:
        got = _validate(args)
        cases = _load_cases(args)
    except UsageError as e:
        _err(str(e))
        return EXIT_USAGE
    try:
        registry, default, run_scenario = _builtin_registry()
    except ImportError as e:
        _err(f"compile_checks.scenarios is not available ({e})")
        return EXIT_RUN_FAILED
    if args.list:
        for name, sc in registry.items():
            print(f"{'*' if name in default else ' '} {name:24} {getattr(sc, 'description', '')}")
        return EXIT_OK
    if args.out is None:
        _err("--out DIR is required")
        return EXIT_USAGE
    names = list(args.scenario) if args.scenario else ([] if cases else default)
    unknown = unknown_scenarios(names, registry)
    if unknown:
        _err(f"unknown scenario(s): {', '.join(unknown)}; valid: {', '.join(sorted(registry))}")
        return EXIT_USAGE
    problem = check_writable(args.out)
    if problem is None and args.write_baseline is not None:
        problem = check_writable(args.write_baseline.parent)
    if problem is not None:
        _err(problem)
        return EXIT_UNWRITABLE
    started = time.perf_counter()
    try:
        df, nodes = _report(args, [registry[n] for n in names], run_scenario, cases, got["video_chunks"])
    except Exception as e:  # a failed compile must not end as a bare traceback
        _err(f"a case failed: {type(e).__name__}: {e}")
        try:
            (args.out / "error.txt").write_text("".join(traceback.format_exception(e)))
            print(f"report: full traceback in {args.out / 'error.txt'}", file=sys.stderr)
        except OSError:
            pass
        return EXIT_RUN_FAILED
    return _finish(args, got, df, nodes, started)


def _report(args: argparse.Namespace, scenarios: list[Any], run_scenario: Any, cases: list[Any],
            video_chunks: int) -> tuple[Any, Any]:
    from tqdm import tqdm

    from compile_checks.reports import traffic as tr

    with tqdm(total=len(scenarios) + len(cases), desc="report", unit="case", disable=args.no_progress,
              file=sys.stderr) as bar:
        builtin = _run_builtin(scenarios, run_scenario, args, bar)
        targets = _run_targets(cases, args, bar)
    ms: dict[str, float] = {}
    if args.measure:
        from compile_checks.reports.measure import DEFAULT_ROUNDS, measure, scenario_measure_case

        todo = [scenario_measure_case(s) for s in scenarios] + [(c, None) for c in cases]
        ms = measure(todo, rounds=args.rounds or DEFAULT_ROUNDS)
    made = [tr.traffic_row_and_nodes(r, video_chunks, ms_per_step=ms.get(r.scenario.name, tr.NAN),
                                     analysis_only=not args.full) for r in builtin]
    made += [tr.case_row_and_nodes(r, calls, ideal, video_chunks, ms.get(r.case.name, tr.NAN))
             for r, calls, ideal in targets]
    rows = [row for row, _ in made]
    return tr.traffic_table(rows), tr.nodes_table([n for _, nodes in made for n in nodes])


def _finish(args: argparse.Namespace, got: dict[str, Any], df: Any, nodes: Any, started: float) -> int:
    from compile_checks.reports import baseline as bl
    from compile_checks.reports.outputs import write_outputs

    entries = {str(r["scenario"]): bl.BaselineEntry(int(r["surviving_clones"]), float(r["extra_bytes_per_step"]))
               for _, r in df.iterrows()}
    try:
        write_outputs(df, nodes, args.out, got["video_chunks"], got["bench"])
        if args.write_baseline is not None:
            args.write_baseline.write_text(bl.dump_baseline(entries))
    except OSError as e:
        _err(f"cannot write the report: {e}")
        return EXIT_UNWRITABLE
    for v in df["verdict"]:
        print(v)
    print(f"report: {len(df)} case(s) in {time.perf_counter() - started:.1f} s; "
          f"wrote {args.out}/traffic{{.csv,_nodes.csv,.md,.html,.png}}")
    if args.write_baseline is not None:
        print(f"report: baseline written to {args.write_baseline}")
    if got["baseline"] is None:
        return EXIT_OK
    cmp = bl.compare(got["baseline"], entries)
    for name in cmp.new_scenarios:
        print(f"baseline: {name} is new (not in {args.baseline}), not compared")
    for name in cmp.improved:
        print(f"baseline: {name} improved (fewer clones or bytes); consider --write-baseline")
    if not cmp.ok:
        for r in cmp.regressions:
            print(f"baseline: REGRESSION {r.describe()}", file=sys.stderr)
        return EXIT_REGRESSION
    print(f"baseline: ok, nothing grew against {args.baseline}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
