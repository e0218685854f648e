"""``compile-checks`` / ``python -m compile_checks``: gate cases for pool clones, exit with a meaning.

Subcommands: ``gate [TARGET...]`` (the default), ``list``, ``dump``, ``report``. Options work
before or after the subcommand (``compile-checks --json gate`` == ``compile-checks gate --json``).
``--help`` and usage errors answer without importing torch.

Exit codes (the README has the same table):
    0  every case met its expectation (clean cases clean, negative controls still cloning)
    1  some case did not (a surviving clone, or a negative control that stopped cloning)
    2  usage error, unknown scenario, bad target, bad ``[tool.compile_checks]`` table
    3  an output path (``--junitxml``, ``--dump-dir``, ``--out``) cannot be written
    4  a case failed to compile (or the check itself failed); one line per case says why
    5  every verdict met, but a compiled run differs from its eager reference
When several apply, the first in the order 3, 4, 1, 5 wins.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from compile_checks.vocab import PIPELINES, ErrorKind
from compile_checks.errors import UnwritableOutput, UsageError
from compile_checks.gate.config import ConfigError, GateConfig, load_config

EXIT_CLEAN = 0
EXIT_CLONES = 1
EXIT_USAGE = 2
EXIT_UNWRITABLE = 3
EXIT_COMPILE = 4
EXIT_MISMATCH = 5


# options accepted both before and after the subcommand: (flags, argparse kwargs); default None
_RUN_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--json",), dict(action="store_const", const=True, help="machine-readable output on stdout (schema_version 1)")),
    (("--no-progress",), dict(action="store_const", const=True, help="no progress bar on stderr")),
    (("--config",), dict(metavar="PYPROJECT", help="read [tool.compile_checks] from this file (default ./pyproject.toml)")),
    (("--scenario",), dict(action="append", metavar="NAME", help="built-in scenario(s) instead of the built-in gate")),
    (("--pipeline",), dict(action="append", choices=PIPELINES, help="run every case under this pipeline (repeatable)")),
    (("--full",), dict(action="store_const", const=True, help="compile every case fully (default: analysis-only verdicts)")),
    (("--analysis-only",), dict(action="store_const", const=True, help="no full compile at all (drops the codegen smoke)")),
    (("--junitxml",), dict(metavar="PATH", help="write a JUnit XML report (one testcase per case)")),
    (("--dump-dir", "--dump"), dict(dest="dump_dir", metavar="DIR", help="depyf dumps + index.md per case under DIR")),
    (("--jobs", "-j"), dict(type=int, metavar="N", help="run cases in N spawned processes (default: 2 on 2+ cores for 8+ cases, else 1)")),
    (("--timings",), dict(action="store_const", const=True, help="per-phase compile times per case")),
]
_APPENDS = {"scenario", "pipeline"}
_NOT_FOR_LIST = {"pipeline", "full", "analysis_only", "junitxml", "dump_dir", "jobs", "timings"}


def _dest(flags: tuple[str, ...], kw: dict[str, Any]) -> str:
    return kw.get("dest") or flags[0].lstrip("-").replace("-", "_")


def _add_run_options(parser: argparse.ArgumentParser, prefix: str) -> None:
    for flags, kw in _RUN_OPTIONS:
        kw = dict(kw, dest=prefix + _dest(flags, kw), default=None)
        if prefix:  # the subcommand's copy: shown once, in the subcommand's --help
            parser.add_argument(*flags, **kw)
        else:
            parser.add_argument(*flags, **{**kw, "help": argparse.SUPPRESS})


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="compile-checks",
        description="Check that Inductor re-inplaces your engine's paged-KV writes (no pool-sized clones).",
        epilog="Exit codes: 0 all met, 1 not met, 2 usage, 3 unwritable output, 4 compile error, 5 compiled != eager.",
    )
    _add_run_options(p, "")
    sub = p.add_subparsers(dest="command", metavar="{gate,list,dump,report}")
    target_help = "path/to/file.py:NAME or package.module:NAME (a Case, a list, or a zero-arg callable)"
    g = sub.add_parser("gate", help="check cases (targets, pyproject, or the built-in gate); the default")
    g.add_argument("targets", nargs="*", metavar="TARGET", help=target_help)
    _add_run_options(g, "sub_")
    ls = sub.add_parser("list", help="list the built-in scenarios, or the cases the targets/pyproject name")
    ls.add_argument("targets", nargs="*", metavar="TARGET", help=target_help)
    _add_run_options(ls, "sub_")
    d = sub.add_parser("dump", help="compile cases fully with depyf dumps and an index.md per case")
    d.add_argument("targets", nargs="*", metavar="TARGET", help=target_help)
    d.add_argument("--out", required=True, metavar="DIR")
    _add_run_options(d, "sub_")
    r = sub.add_parser("report", help="traffic report (compile_checks.reports); arguments are passed through", add_help=False)
    r.add_argument("report_args", nargs=argparse.REMAINDER)
    return p


def _merge(args: argparse.Namespace) -> argparse.Namespace:
    """Fold the subcommand's copies of the run options into the top-level ones."""
    for flags, kw in _RUN_OPTIONS:
        dest = _dest(flags, kw)
        sub_value = getattr(args, "sub_" + dest, None)
        if sub_value is None:
            continue
        top = getattr(args, dest)
        setattr(args, dest, (top or []) + sub_value if dest in _APPENDS else sub_value)
    return args


# ---- safe output ----------------------------------------------------------------------------


def _stdout_gone() -> None:
    """After a BrokenPipeError (``| head``): point stdout at /dev/null so the exit flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _check_writable_dir(path: Path) -> None:
    from compile_checks.gate.outdir import writable_dir_problem

    problem = writable_dir_problem(path)
    if problem is not None:
        raise UnwritableOutput(problem)


def _check_writable_file(path: Path) -> None:
    if path.is_dir():
        raise UnwritableOutput(f"cannot write to {path}: is a directory")
    _check_writable_dir(path.parent)


# ---- resolving what to run ------------------------------------------------------------------


def _config(args: argparse.Namespace) -> GateConfig | None:
    path = Path(args.config) if args.config else Path.cwd() / "pyproject.toml"
    if args.config and not path.is_file():
        raise UsageError(f"--config {args.config}: no such file")
    try:
        return load_config(path)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def _plan(args: argparse.Namespace, command: str) -> tuple[Any, GateConfig | None]:
    from compile_checks.gate.plan import plan_builtin, plan_targets
    from compile_checks.gate.targets import TargetError

    if args.full and args.analysis_only:
        raise UsageError("--full and --analysis-only contradict each other")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    targets = list(getattr(args, "targets", []) or [])
    if targets and args.scenario:
        raise UsageError("give TARGETs or --scenario, not both")
    # the table's defaults (pipelines, full, junitxml, dump_dir) hold for TARGETs and --scenario
    # runs too; only its `targets` give way to the command line's
    config = _config(args)
    pipelines = list(args.pipeline or (config.pipelines if config else ()))
    full = bool(args.full or (config.full if config else False) or command == "dump")
    from compile_checks.pipelines.vllm_env import prepare_process_for_vllm

    # before any target or scenario can import vLLM: on a CPU-only host its platform must resolve as CPU
    prepare_process_for_vllm()
    try:
        if targets or (config and config.targets and not args.scenario):
            specs = targets or list(config.targets)  # type: ignore[union-attr]
            base = Path.cwd() if targets else config.base_dir  # type: ignore[union-attr]
            return plan_targets(specs, base, pipelines, full=full), config
        if command == "dump" and not args.scenario:
            raise UsageError("dump needs TARGETs or --scenario NAME")
        if command == "dump":
            pipelines = pipelines or ["stock"]
        plan = plan_builtin(args.scenario or [], pipelines, full=full, smoke=not args.analysis_only)
        return plan, config
    except (TargetError, ValueError) as e:
        raise UsageError(str(e)) from None


def exit_code(outcomes: Sequence[Any]) -> int:
    if any(o.error_kind == ErrorKind.UNWRITABLE for o in outcomes):
        return EXIT_UNWRITABLE
    if any(o.error_kind == ErrorKind.COMPILE for o in outcomes):
        return EXIT_COMPILE
    if any(not o.verdict_met for o in outcomes):
        return EXIT_CLONES
    if any(o.eager_match is False for o in outcomes):
        return EXIT_MISMATCH
    return EXIT_CLEAN


# ---- subcommands ----------------------------------------------------------------------------


def _gate(args: argparse.Namespace, command: str) -> int:
    from compile_checks.gate.outputs import json_document, print_results
    from compile_checks.gate.junit import write_junit
    from compile_checks.gate.runner import auto_jobs, progress_callback, run_plan

    plan, config = _plan(args, command)
    if not plan.cases:
        raise UsageError("nothing to check: the targets/scenarios name no cases")
    junit = Path(args.junitxml) if args.junitxml else (config.junitxml if config else None)
    dump_root = Path(args.out) if command == "dump" else (Path(args.dump_dir) if args.dump_dir else (config.dump_dir if config else None))
    if junit is not None:
        _check_writable_file(junit)
    if dump_root is not None:
        _check_writable_dir(dump_root)
    on_done, close = progress_callback(len(plan.cases), not args.no_progress)
    t0 = time.perf_counter()
    try:
        jobs = args.jobs if args.jobs is not None else auto_jobs(len(plan.cases))
        outcomes = run_plan(plan, dump_root=dump_root, jobs=jobs, on_done=on_done)
    finally:
        close()
    seconds = time.perf_counter() - t0
    code = exit_code(outcomes)
    if junit is not None:
        try:
            write_junit(outcomes, junit, seconds)
        except OSError as e:
            raise UnwritableOutput(f"cannot write {junit}: {e.strerror or e}") from None
    try:
        if args.json:
            print(json_document(outcomes, code, seconds, plan.notes))
        else:
            print_results(outcomes, title=f"compile-checks {command}", code=code, seconds=seconds, notes=plan.notes, timings=bool(args.timings))
            if dump_root is not None:
                print(f"dumps: {dump_root}/<case>/index.md")
    except BrokenPipeError:
        _stdout_gone()
    return code


def _list(args: argparse.Namespace) -> int:
    import json

    used = sorted(k for k in _NOT_FOR_LIST if getattr(args, k) is not None)
    if used:
        raise UsageError(f"list does not take {', '.join('--' + k.replace('_', '-') for k in used)}")
    config = None if (args.targets or args.scenario) else _config(args)
    if args.targets or args.scenario or (config is not None and config.targets):
        plan, _ = _plan(args, "list")
        rows = [
            {"name": p.label, "group": p.group, "pipeline": p.pipeline, "expect_clean": p.expect_clean,
             "mode": "analysis" if p.analysis_only else "full"}
            for p in plan.cases
        ]
        lines = [f"{r['name']:28s} {r['group']:40s} {r['mode']:8s} expect {'clean' if r['expect_clean'] else 'clones'}" for r in rows]
    else:
        from compile_checks.scenarios import DEFAULT_GATE, SCENARIOS

        rows = [
            {"name": s.name, "layout": s.layout, "expect_clean": s.expect_clean, "in_gate": s.name in DEFAULT_GATE, "description": s.description}
            for s in SCENARIOS.values()
        ]
        lines = [
            f"{r['name']:28s} {'gate' if r['in_gate'] else '    '} expect {'clean ' if r['expect_clean'] else 'clones'}  {r['description']}"
            for r in rows
        ]
    try:
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for line in lines:
                print(line)
        sys.stdout.flush()
    except BrokenPipeError:  # `compile-checks list | head`: the reader left; not an error
        _stdout_gone()
    return EXIT_CLEAN


def _report(report_args: Sequence[str]) -> int:
    try:
        from compile_checks.reports.cli import main as report_main
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("compile_checks.reports"):
            raise
        print("error: compile-checks report needs compile_checks.reports, which this install does not have", file=sys.stderr)
        return EXIT_USAGE
    return int(report_main(list(report_args)) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (console script ``compile-checks``); returns the exit code, never a traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:  # everything after it belongs to the report's own parser (--help included)
        return _report(argv[1:])
    parser = _parser()
    try:
        args = _merge(parser.parse_args(argv))
    except SystemExit as e:  # argparse printed its usage line (or --help)
        return EXIT_USAGE if e.code not in (0, None) else EXIT_CLEAN
    command = args.command or "gate"
    handlers: dict[str, Callable[[], int]] = {
        "gate": lambda: _gate(args, "gate"),
        "dump": lambda: _gate(args, "dump"),
        "list": lambda: _list(args),
        "report": lambda: _report(args.report_args),
    }
    try:
        if command == "report" and any(getattr(args, _dest(f, kw)) is not None for f, kw in _RUN_OPTIONS):
            raise UsageError("report takes its own options after the subcommand: compile-checks report --help")
        return handlers[command]()
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except UnwritableOutput as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_UNWRITABLE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
