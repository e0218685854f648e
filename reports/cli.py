"""``python -m reports``: run the traffic scenarios and write the CSV / Markdown / HTML / PNG report.

Exit codes: 0 ok; 1 a scenario's clones or clone bytes grew against ``--baseline``;
2 bad arguments (unknown scenario, unreadable baseline); 3 the output directory
cannot be written; 4 a scenario failed to run (or the scenario registry is missing).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Pool-size variants of the registry's scenarios (same model, more blocks): total pool
# bytes (all layers, K+V) -> num_blocks is derived from the base scenario's geometry.
POOL_VARIANTS: tuple[tuple[str, int], ...] = (
    ("split", 16), ("fused", 16), ("split", 64), ("fused", 64), ("split", 256), ("fused", 256),
)

# The default report, in table order: the clean split layout, the fused negative control,
# and both at growing pool sizes (1, 16, 64 MiB). Five compiles of two regions each: about
# 60 s on 2 idle cores. The rest of the registry (fused_v1, fused_kv, list, ...) by --scenario.
PREFERRED_DEFAULT: tuple[str, ...] = (
    "split",
    "fused",
    "fused_pool16MiB",
    "split_pool64MiB",
    "fused_pool64MiB",
)


def pool_variant_name(base: str, total_mib: int) -> str:
    return f"{base}_pool{total_mib}MiB"


def with_pool_variants(registry: Mapping[str, Any]) -> dict[str, Any]:
    """The registry plus ``<base>_pool<N>MiB`` copies of its scenarios resized to N MiB of pool."""
    from dataclasses import replace

    out = dict(registry)
    for base, mib in POOL_VARIANTS:
        s = registry.get(base)
        if s is None or not hasattr(s, "total_pool_bytes"):
            continue
        per_block = s.total_pool_bytes // s.num_blocks
        num_blocks = max(1, (mib << 20) // per_block)
        name = pool_variant_name(base, mib)
        out[name] = replace(
            s, name=name, num_blocks=num_blocks,
            description=f"{base} with a {mib} MiB pool ({num_blocks} blocks): same window, same ideal traffic",
        )
    return out


EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_UNWRITABLE, EXIT_RUN_FAILED = 0, 1, 2, 3, 4


def default_scenario_names(registry: Mapping[str, Any], gate: Sequence[str]) -> list[str]:
    """The preferred report set that the registry has; the gate when none of it is there."""
    names = [n for n in PREFERRED_DEFAULT if n in registry]
    return names or [n for n in gate if n in registry]


def unknown_scenarios(requested: Sequence[str], registry: Mapping[str, Any]) -> list[str]:
    return [n for n in requested if n not in registry]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reports", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="output directory (created if missing); required unless --list")
    p.add_argument("--scenario", action="append", default=None, metavar="NAME",
                   help="scenario to run (repeatable); default: the traffic set")
    p.add_argument("--baseline", type=Path, help="baseline JSON to compare against; exit 1 on growth")
    p.add_argument("--write-baseline", type=Path, metavar="FILE", help="write this run as a baseline JSON")
    p.add_argument("--video-chunks", type=int, default=None,
                   help="video length in chunks for the per-video columns (default 60)")
    p.add_argument("--bench", type=Path, metavar="CSV",
                   help="reports.bench CSV: adds a measured time-per-step panel to the plot")
    p.add_argument("--dumps", action="store_true", help="keep the graph dumps under OUT/dumps/NAME")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--analysis-only", action="store_true",
                   help="stop Inductor after its post-grad passes: same clones and bytes, no C++ "
                        "codegen, kernel_bytes_per_step is 0 (used by the test suite)")
    p.add_argument("--list", action="store_true", help="list the scenario names (default set marked) and exit")
    return p


def _err(msg: str) -> None:
    print(f"reports: error: {msg}", file=sys.stderr)


def check_writable(out: Path) -> str | None:
    """None if ``out`` can be created and written, else why not (checked before any compile)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        return f"cannot write to output directory {out}: {e.strerror or e}"
    return None


def _run_all(names: Sequence[str], registry: Mapping[str, Any], run_scenario: Any, out: Path,
             dumps: bool, progress: bool, analysis_only: bool = False) -> list[Any]:
    from tqdm import tqdm

    results = []
    bar = tqdm(names, desc="scenarios", unit="scenario", disable=not progress, file=sys.stderr)
    for name in bar:
        bar.set_postfix_str(name)
        dump_dir = str(out / "dumps" / name) if dumps else None
        extra = {"analysis_only": True} if analysis_only else {}
        results.append(run_scenario(registry[name], dump_dir=dump_dir, **extra))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from reports import baseline as bl
    from reports.traffic import DEFAULT_VIDEO_CHUNKS, traffic_row, traffic_table

    video_chunks = DEFAULT_VIDEO_CHUNKS if args.video_chunks is None else args.video_chunks
    if video_chunks < 1:
        _err(f"--video-chunks must be >= 1, got {video_chunks}")
        return EXIT_USAGE
    old_baseline = None
    if args.baseline is not None:
        try:
            old_baseline = bl.load_baseline(args.baseline)
        except bl.BaselineError as e:
            _err(str(e))
            return EXIT_USAGE
    bench_df = None
    if args.bench is not None:
        import pandas as pd

        try:
            bench_df = pd.read_csv(args.bench)
        except (OSError, ValueError) as e:
            _err(f"cannot read bench CSV {args.bench}: {e}")
            return EXIT_USAGE
    try:
        from compile_checks.scenarios import DEFAULT_GATE, run_scenario
        from compile_checks.scenarios import SCENARIOS
    except ImportError as e:
        _err(f"compile_checks.scenarios is not available ({e})")
        return EXIT_RUN_FAILED
    registry = with_pool_variants(SCENARIOS)
    default = default_scenario_names(registry, DEFAULT_GATE)
    if args.list:
        for name, sc in registry.items():
            print(f"{'*' if name in default else ' '} {name:24} {getattr(sc, 'description', '')}")
        return EXIT_OK
    if args.out is None:
        _err("--out DIR is required")
        return EXIT_USAGE
    names = list(args.scenario) if args.scenario else default
    unknown = unknown_scenarios(names, registry)
    if unknown:
        _err(f"unknown scenario(s): {', '.join(unknown)}; valid: {', '.join(sorted(registry))}")
        return EXIT_USAGE
    problem = check_writable(args.out)
    if problem is None and args.write_baseline is not None:
        problem = check_writable(args.write_baseline.parent if str(args.write_baseline.parent) else Path("."))
    if problem is not None:
        _err(problem)
        return EXIT_UNWRITABLE

    started = time.perf_counter()
    try:
        results = _run_all(names, registry, run_scenario, args.out, args.dumps, not args.no_progress,
                           args.analysis_only)
    except Exception as e:  # a failed compile must not end as a bare traceback
        _err(f"a scenario failed: {type(e).__name__}: {e}")
        tb = "".join(traceback.format_exception(e))
        try:
            (args.out / "error.txt").write_text(tb)
            print(f"reports: full traceback in {args.out / 'error.txt'}", file=sys.stderr)
        except OSError:
            pass
        return EXIT_RUN_FAILED
    rows = [traffic_row(r, video_chunks) for r in results]
    df = traffic_table(rows)
    try:
        write_outputs(df, args.out, video_chunks, bench_df)
        if args.write_baseline is not None:
            args.write_baseline.write_text(bl.dump_baseline(bl.entries_from_rows(rows)))
    except OSError as e:
        _err(f"cannot write the report: {e}")
        return EXIT_UNWRITABLE
    for v in df["verdict"]:
        print(v)
    print(f"reports: {len(rows)} scenario(s) in {time.perf_counter() - started:.1f} s; wrote {args.out}/traffic.{{csv,md,html,png}}")
    if args.write_baseline is not None:
        print(f"reports: baseline written to {args.write_baseline}")
    if old_baseline is not None:
        cmp = bl.compare(old_baseline, bl.entries_from_rows(rows))
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


def write_outputs(df: Any, out: Path, video_chunks: int, bench_df: Any = None) -> None:
    """traffic.csv (raw numbers), traffic.md (readable + verdicts), traffic.html, traffic.png."""
    from reports.plot import plot_traffic
    from reports.traffic import markdown_report

    df.to_csv(out / "traffic.csv", index=False)
    (out / "traffic.md").write_text(markdown_report(df, video_chunks))
    (out / "traffic.html").write_text(df.to_html(index=False))
    plot_traffic(df, out / "traffic.png", bench_df)


if __name__ == "__main__":
    sys.exit(main())
