"""``python -m compile_checks``: run the scenarios, print a verdict table, exit with a meaning.

Exit codes (also in the README, "CLI"):
    0  every scenario run is clean (no surviving pool clone) and matches eager
    1  a surviving pool clone was found in a scenario run (``--scenario fused`` exits 1)
    2  usage error or unknown scenario (the message lists the valid names)
    3  the dump / output directory cannot be written
    4  a region failed to compile (or the check itself failed); one line says why
    5  no clone, but the compiled run's pools/latents differ from the eager run's
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_CLEAN = 0
EXIT_CLONES = 1
EXIT_USAGE = 2
EXIT_UNWRITABLE = 3
EXIT_COMPILE = 4
EXIT_MISMATCH = 5


class UsageError(Exception):
    """Bad arguments (exit 2)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m compile_checks",
        description="Check that Inductor re-inplaces the paged-KV commit write (no pool clones).",
    )
    sub = p.add_subparsers(dest="command")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--json", action="store_true", help="machine-readable output on stdout")
        sp.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
        sp.add_argument(
            "--quick",
            action="store_true",
            help="smoke mode: 1 denoising step per chunk, so only the commit graph is compiled",
        )
        sp.add_argument(
            "--analysis-only",
            action="store_true",
            help="stop Inductor after its post-grad passes (same verdict, no C++ codegen, no kernel bytes)",
        )

    g = sub.add_parser("gate", help="run the default gate (or --scenario NAME ...); exit 1 on any clone")
    g.add_argument("--scenario", action="append", metavar="NAME", help="run these scenarios instead of the gate")
    g.add_argument("--dump", metavar="DIR", help="write depyf dumps + index.md per scenario under DIR")
    common(g)
    ls = sub.add_parser("list", help="list the scenarios")
    ls.add_argument("--json", action="store_true")
    d = sub.add_parser("dump", help="run one scenario with depyf dumps and an index.md")
    d.add_argument("--scenario", required=True, metavar="NAME")
    d.add_argument("--out", required=True, metavar="DIR")
    common(d)
    # `python -m compile_checks --scenario fused` == `gate --scenario fused`
    p.add_argument("--scenario", action="append", metavar="NAME", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--analysis-only", action="store_true", help=argparse.SUPPRESS)
    return p


def _resolve(names: Sequence[str]) -> list[Any]:
    from compile_checks.scenarios import SCENARIOS

    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise UsageError(f"unknown scenario {', '.join(map(repr, unknown))}; valid: {', '.join(SCENARIOS)}")
    return [SCENARIOS[n] for n in names]


def _check_writable(path: Path) -> None:
    """Create ``path`` and write a probe file there; OSError if that is impossible.

    (``os.access`` is not enough: as root it says yes to read-only directories.)
    """
    path.mkdir(parents=True, exist_ok=True)
    probe = path / ".compile_checks_write_probe"
    probe.write_text("")
    probe.unlink()


def _result_dict(r: Any) -> dict[str, Any]:
    s = r.scenario
    return {
        "name": s.name,
        "layout": s.layout,
        "dtype": str(s.dtype).removeprefix("torch."),
        "functionalization": s.functionalization,
        "dynamic": s.dynamic,
        "num_layers": s.num_layers,
        "layers_per_region": s.layers_per_region,
        "expect_clean": s.expect_clean,
        "clean": r.clean,
        "passed": r.passed,
        "eager_match": r.eager_match,
        "max_rel_diff": r.max_abs_diff,
        "num_steps": r.num_steps,
        "num_chunks": r.num_chunks,
        "evicted_blocks": r.evicted_blocks,
        "ideal_read_bytes": r.ideal_read_bytes,
        "ideal_write_bytes": r.ideal_write_bytes,
        "clone_traffic_bytes": r.clone_traffic_per_run,
        "compile_seconds": round(r.compile_seconds, 2),
        "wall_seconds": round(r.wall_seconds, 2),
        "report": r.report.to_dict(),
        "description": s.description,
    }


def _table(results: Sequence[Any], title: str) -> Any:
    from rich.table import Table

    t = Table(title=title)
    for col in ("scenario", "layout", "dtype", "func", "dyn", "layers/region", "verdict", "expected", "eager==compiled", "compile s"):
        t.add_column(col)
    for r in results:
        s = r.scenario
        if r.clean:
            verdict = "[green]clean[/green]"
        else:
            args = sorted({f"{c.arg}" for c in r.report.clones})
            verdict = f"[red]{len(r.report.clones)} clone(s) {','.join(args)} {r.report.clone_bytes} B[/red]"
        t.add_row(
            s.name,
            s.layout,
            str(s.dtype).removeprefix("torch."),
            s.functionalization,
            "yes" if s.dynamic else "no",
            f"{s.layers_per_region}/{s.num_layers}",
            verdict,
            "clean" if s.expect_clean else "clones",
            "yes" if r.eager_match else f"[red]NO ({r.max_abs_diff:.2e})[/red]",
            f"{r.compile_seconds:.1f}",
        )
    return t


def _run(
    scenarios: Sequence[Any], dump_root: Path | None, progress: bool, per_scenario_dump: bool, analysis_only: bool = False
) -> list[Any]:
    from compile_checks.scenarios import run_scenario

    results = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(scenarios), desc="scenarios", unit="scenario", file=sys.stderr)
    try:
        for s in scenarios:
            if bar is not None:
                bar.set_postfix_str(s.name)
            dump = None
            if dump_root is not None:
                dump = dump_root / s.name if per_scenario_dump else dump_root
            results.append(run_scenario(s, dump_dir=dump, progress=False, analysis_only=analysis_only))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return results


def _exit_code(results: Sequence[Any]) -> int:
    if any(not r.clean for r in results):
        return EXIT_CLONES
    if any(not r.eager_match for r in results):
        return EXIT_MISMATCH
    return EXIT_CLEAN


def _emit(results: Sequence[Any], as_json: bool, title: str, elapsed: float, code: int) -> None:
    if as_json:
        print(json.dumps({"exit_code": code, "seconds": round(elapsed, 2), "scenarios": [_result_dict(r) for r in results]}, indent=2))
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped / CI logs: do not squeeze the table to 80 columns
    console.print(_table(results, title))
    for r in results:
        for c in r.report.clones:
            where = f"{c.graph_file}:{c.line}" if c.graph_file else f"region {c.region} node {c.node}"
            console.print(f"  {r.scenario.name}: {c.op} {c.arg} pool {c.pool} {c.nbytes} bytes at {where}", highlight=False)
    console.print(f"{len(results)} scenario(s) in {elapsed:.1f} s; exit {code}", highlight=False)


def _list(as_json: bool) -> int:
    from compile_checks.scenarios import DEFAULT_GATE, SCENARIOS

    if as_json:
        rows = [
            {"name": s.name, "layout": s.layout, "expect_clean": s.expect_clean, "in_gate": s.name in DEFAULT_GATE, "description": s.description}
            for s in SCENARIOS.values()
        ]
        print(json.dumps(rows, indent=2))
        return EXIT_CLEAN
    for s in SCENARIOS.values():
        gate = "gate" if s.name in DEFAULT_GATE else "    "
        expect = "clean " if s.expect_clean else "clones"
        print(f"{s.name:24s} {gate} expect {expect}  {s.description}")
    return EXIT_CLEAN


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (never raises for expected failures)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed its one-line error
        return EXIT_USAGE if e.code not in (0, None) else EXIT_CLEAN
    command = args.command or "gate"
    try:
        if command == "list":
            return _list(args.json)
        as_json = bool(getattr(args, "json", False))
        progress = not getattr(args, "no_progress", False)
        dump_root: Path | None = None
        if command == "dump":
            dump_root = Path(args.out)
        elif getattr(args, "dump", None):
            dump_root = Path(args.dump)
        if dump_root is not None:  # before importing torch: fail fast
            try:
                _check_writable(dump_root)
            except OSError as e:
                print(f"error: cannot write to {dump_root}: {e.strerror or e}", file=sys.stderr)
                return EXIT_UNWRITABLE
        from compile_checks.api import CompileCheckError
        from compile_checks.scenarios import DEFAULT_GATE

        if command == "dump":
            scenarios = _resolve([args.scenario])
        else:
            scenarios = _resolve(getattr(args, "scenario", None) or list(DEFAULT_GATE))
        if getattr(args, "quick", False):
            from dataclasses import replace

            scenarios = [replace(s, denoise_steps=1) for s in scenarios]
        t0 = time.perf_counter()
        try:
            results = _run(
                scenarios,
                dump_root,
                progress,
                per_scenario_dump=command != "dump",
                analysis_only=bool(getattr(args, "analysis_only", False)),
            )
        except CompileCheckError as e:
            print(f"error: compile failed: {e}", file=sys.stderr)
            return EXIT_COMPILE
        except OSError as e:
            print(f"error: cannot write dumps: {e}", file=sys.stderr)
            return EXIT_UNWRITABLE
        code = _exit_code(results)
        title = "compile_checks " + ("dump" if command == "dump" else "gate")
        _emit(results, as_json, title, time.perf_counter() - t0, code)
        if command == "dump" and not as_json:
            print(f"index: {dump_root / 'index.md'}")
        return code
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line, never a bare traceback
        first = (str(e).splitlines() or [""])[0]
        print(f"error: the check failed: {type(e).__name__}: {first}", file=sys.stderr)
        return EXIT_COMPILE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

