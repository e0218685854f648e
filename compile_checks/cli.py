"""``compile-checks`` / ``python -m compile_checks``: gate cases for pool clones, exit with a meaning.

One parser, six subcommands: ``gate [TARGET...]`` (the default), ``list``, ``dump``, ``report``,
``merge OUT.json...`` (the ``gate --shard K/N --json`` outputs of a CI matrix as one run) and
``scan PATH...`` (audit logged compiles: :mod:`compile_checks.scan`).
The gate's options work before or after the subcommand (``compile-checks --json gate`` ==
``compile-checks gate --json``); the report's options follow ``report``. ``--help`` and usage
errors answer without importing torch.

The mode (:class:`~compile_checks.vocab.Mode`) is resolved here, once, from ``--full`` /
``--analysis-only`` (and ``[tool.compile_checks] full``): ``analysis`` (the gate's default:
analysis-only verdicts plus the built-in codegen smoke), ``analysis-only`` (no codegen at all; the
report's default, as the report has no smoke), ``full`` (every case compiled fully; ``dump`` always).
``--full`` with ``--analysis-only`` is a usage error, on ``gate`` and ``report`` alike.

Exit codes, every subcommand (the README has the same table; :class:`~compile_checks.vocab.ExitCode`):
    0    every case met its expectation (clean cases clean, negative controls still cloning);
         report: written, and nothing grew against ``--baseline``
    1    some case did not (a surviving clone, or a negative control that stopped cloning);
         report: a case's clones or extra bytes grew against ``--baseline``
    2    usage error: bad option, unknown scenario, bad target, bad ``[tool.compile_checks]`` table,
         report: unreadable or invalid baseline / bench CSV, the report extra not installed
    3    an output path (``--junitxml``, ``--dump-dir``, ``--out``, ``--write-baseline``) cannot be written
    4    a case failed to compile (or the check itself failed); one line per case says why
    5    every verdict met, but a compiled run differs from its eager reference
    130  interrupted (Ctrl-C)
When several apply, the first in the order 3, 4, 1, 5 wins. Usage and output problems are found
before anything compiles.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compile_checks.errors import UnwritableOutput, UsageError
from compile_checks.gate.config import ConfigError, GateConfig, load_config
from compile_checks.gate.stderr_noise import HeldStderr, held_stderr, wanted
from compile_checks.vocab import PIPELINES, ExitCode, Mode

Option = tuple[tuple[str, ...], dict[str, Any]]


def _o(*flags: str, **kw: Any) -> Option:
    return flags, kw


_FLAG: dict[str, Any] = {"action": "store_const", "const": True}  # the gate's flags: None when not given

# the gate's options, accepted both before and after the subcommand; default None
_RUN_OPTIONS: list[Option] = [
    _o("--json", **_FLAG, help="machine-readable output on stdout (schema_version 1)"),
    _o("--no-progress", **_FLAG, help="no progress bar on stderr"),
    _o("--config", metavar="PYPROJECT", help="read [tool.compile_checks] from this file (default ./pyproject.toml)"),
    _o("--scenario", action="append", metavar="NAME", help="built-in scenario(s) instead of the built-in gate"),
    _o("--pipeline", action="append", choices=PIPELINES, help="run every case under this pipeline (repeatable)"),
    _o("--full", **_FLAG, help="compile every case fully (default: analysis-only verdicts)"),
    _o("--analysis-only", **_FLAG, help="no full compile at all (drops the codegen smoke)"),
    _o("--junitxml", metavar="PATH", help="write a JUnit XML report (one testcase per case)"),
    _o("--dump-dir", "--dump", dest="dump_dir", metavar="DIR", help="depyf dumps + index.md per case under DIR"),
    _o(
        "--jobs",
        "-j",
        type=int,
        metavar="N",
        help="run cases in N spawned processes (default: 2 on 2+ cores for 8+ cases, else 1)",
    ),
    _o("--timings", **_FLAG, help="per-phase compile times per case"),
    _o("--shard", metavar="K/N", help="run shard K of N of the plan (a stable split; `merge` joins the outputs)"),
    _o(
        "--shard-timings",
        metavar="JSON",
        help="balance --shard by each case's wall seconds in an earlier gate/merge --json output",
    ),
    _o("--verbose", "-v", **_FLAG, help="every copy with its own explanation (default: one per group alike)"),
]
_APPENDS = {"scenario", "pipeline"}
_NOT_FOR_LIST = {"full", "analysis_only", "junitxml", "dump_dir", "jobs", "timings", "verbose"}

# the report's options (after ``report`` only); dest = "report_" + the ReportRequest field
_REPORT_OPTIONS: list[Option] = [
    _o("--out", type=Path, metavar="DIR", help="output directory (created if missing); required unless --list"),
    _o(
        "--target",
        dest="targets",
        action="append",
        metavar="TARGET",
        help="your cases: path/to/file.py:NAME or package.module:NAME (repeatable)",
    ),
    _o(
        "--scenario",
        dest="scenarios",
        action="append",
        metavar="NAME",
        help="built-in scenario (repeatable); default without targets: the traffic set",
    ),
    _o("--baseline", type=Path, metavar="JSON", help="baseline JSON to compare against; exit 1 on growth"),
    _o("--write-baseline", type=Path, metavar="FILE", help="write this run as a baseline JSON"),
    _o("--video-chunks", type=int, metavar="N", help="video length in chunks (default 60)"),
    _o("--bench", type=Path, metavar="CSV", help="reports/bench.py CSV: adds its timing panel"),
    _o(
        "--measure",
        action="store_true",
        help="also compile fully and time each case (ms_per_step, interleaved medians)",
    ),
    _o("--rounds", type=int, metavar="N", help="--measure: interleaved rounds (default 7)"),
    _o(
        "--full",
        action="store_true",
        help="compile fully (C++ codegen) for the verdicts; adds Inductor's kernel-byte estimate",
    ),
    _o("--analysis-only", action="store_true", help="verdicts from the post-grad graph, no codegen (the default)"),
    _o("--dumps", action="store_true", help="keep the graph dumps under OUT/dumps/NAME"),
    _o("--no-progress", action="store_true", help="no progress bar"),
    _o(
        "--list",
        dest="list_scenarios",
        action="store_true",
        help="list the built-in scenario names (default set marked)",
    ),
]


# the scan's options (after ``scan`` only); dest = "scan_" + the ScanRequest field
_SCAN_OPTIONS: list[Option] = [
    _o("--pools", dest="pools_file", type=Path, metavar="TOML", help="[pools] table: graph input -> pool name"),
    _o("--config", type=Path, metavar="PYPROJECT", help="read [tool.compile_checks.scan] from this file"),
    _o("--junitxml", type=Path, metavar="PATH", help="write a JUnit XML report (one testcase per graph)"),
    _o("--json", action="store_true", help="machine-readable output on stdout (schema_version 1)"),
    _o("--import", dest="imports", action="append", default=[], metavar="MODULE", help="register custom ops"),
]


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
        epilog="Exit codes: 0 all met, 1 not met, 2 usage, 3 unwritable output, 4 compile error, "
        "5 compiled != eager, 130 interrupted.",
    )
    _add_run_options(p, "")
    sub = p.add_subparsers(dest="command", metavar="{gate,list,dump,report,merge,scan}")
    target_help = "path/to/file.py:NAME or package.module:NAME (a Case, a list, or a zero-arg callable)"
    g = sub.add_parser("gate", help="check cases (targets, pyproject, or the built-in gate); the default")
    g.add_argument("targets", nargs="*", metavar="TARGET", help=target_help)
    _add_run_options(g, "sub_")
    ls = sub.add_parser(
        "list", help="list the built-in scenarios, or the plan the targets/pyproject/--pipeline/--shard name"
    )
    ls.add_argument("targets", nargs="*", metavar="TARGET", help=target_help)
    _add_run_options(ls, "sub_")
    d = sub.add_parser(
        "dump", help="compile cases fully with depyf dumps and an index.md per case (each under its own pipeline)"
    )
    d.add_argument("targets", nargs="*", metavar="TARGET", help=target_help)
    d.add_argument("--out", required=True, metavar="DIR")
    _add_run_options(d, "sub_")
    m = sub.add_parser(
        "merge",
        help="merge the --json outputs of `gate --shard K/N` into one run (table, --json, --junitxml; the gate's exit)",
    )
    m.add_argument("merge_files", nargs="+", metavar="OUT.json", help="one gate --shard K/N --json output per shard")
    m.add_argument("--json", dest="merge_json", action="store_true", help="the merged run as the gate's --json")
    m.add_argument("--junitxml", dest="merge_junitxml", metavar="PATH", help="write the merged run's JUnit XML")
    r = sub.add_parser(
        "report",
        help="traffic report: extra bytes of surviving copies against the ideal, per case",
        description="Writes traffic.csv / traffic_nodes.csv / traffic.md / traffic.html / traffic.png for your "
        "cases (--target, else [tool.compile_checks] targets of ./pyproject.toml) or the built-in scenarios "
        "(--scenario, or when there are no targets). Every case runs through run_case, as in the gate.",
    )
    for flags, kw in _REPORT_OPTIONS:
        default = False if kw.get("action") == "store_true" else None
        r.add_argument(*flags, **dict(kw, dest="report_" + _dest(flags, kw), default=default))
    s = sub.add_parser(
        "scan",
        help="audit logged compiles (TORCH_TRACE, Inductor debug folders, depyf/vLLM dumps) without re-running them",
    )
    s.add_argument("scan_paths", nargs="+", type=Path, metavar="PATH", help="a trace file or folder, or a dump folder")
    for flags, kw in _SCAN_OPTIONS:
        s.add_argument(*flags, **dict(kw, dest="scan_" + _dest(flags, kw)))
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


# ---- option resolution: the one place the command line becomes a mode and a config --------------


def resolve_mode(full: bool | None, analysis_only: bool | None, default: Mode) -> Mode:
    """``--full`` / ``--analysis-only`` as a Mode (``default`` when neither); both is a usage error."""
    if full and analysis_only:
        raise UsageError("--full and --analysis-only contradict each other")
    if full:
        return Mode.FULL
    return Mode.ANALYSIS_ONLY if analysis_only else default


def _config(args: argparse.Namespace) -> GateConfig | None:
    path = Path(args.config) if args.config else Path.cwd() / "pyproject.toml"
    if args.config and not path.is_file():
        raise UsageError(f"--config {args.config}: no such file")
    try:
        return load_config(path)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def _gate_mode(args: argparse.Namespace, command: str, config: GateConfig | None) -> Mode:
    """The gate's mode: the command line over the table's ``full``; ``dump`` always compiles fully."""
    if command == "dump":
        if args.analysis_only:
            raise UsageError("dump compiles fully (its dumps hold the generated code): no --analysis-only")
        return Mode.FULL
    table = Mode.FULL if config is not None and config.full else Mode.ANALYSIS
    if command == "list":
        return table
    return resolve_mode(args.full, args.analysis_only, table)


def _check_run_options(args: argparse.Namespace, command: str) -> None:
    """What can be wrong with the gate's options alone (no config, no import of torch)."""
    if command == "list":
        used = sorted(k for k in _NOT_FOR_LIST if getattr(args, k) is not None)
        if used:
            raise UsageError(f"list does not take {', '.join('--' + k.replace('_', '-') for k in used)}")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    if getattr(args, "targets", None) and args.scenario:
        raise UsageError("give TARGETs or --scenario, not both")
    if args.shard is not None:
        from compile_checks.gate.shard import Shard  # torch-free: a bad K/N is answered before anything loads

        Shard.parse(args.shard)


def _report(args: argparse.Namespace) -> int:
    if any(getattr(args, _dest(f, kw)) is not None for f, kw in _RUN_OPTIONS):
        raise UsageError("report takes its own options after the subcommand: compile-checks report --help")
    mode = resolve_mode(args.report_full, args.report_analysis_only, Mode.ANALYSIS_ONLY)
    # here, not at the top: --help and usage errors stay torch-free (and a missing room is answered)
    from compile_checks.reports.command import ReportRequest, run_report

    fields = {k.removeprefix("report_"): v for k, v in vars(args).items() if k.startswith("report_")}
    del fields["full"], fields["analysis_only"]  # resolved into the mode above
    fields["progress"] = not fields.pop("no_progress")
    fields["targets"], fields["scenarios"] = tuple(fields["targets"] or ()), tuple(fields["scenarios"] or ())
    return run_report(ReportRequest(mode=mode, **fields))


def _scan(args: argparse.Namespace) -> int:
    if any(getattr(args, _dest(f, kw)) is not None for f, kw in _RUN_OPTIONS):
        raise UsageError("scan takes its own options after the subcommand: compile-checks scan --help")
    missing = [str(p) for p in args.scan_paths if not p.exists()]
    if missing:  # before torch loads, as every usage error
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    from compile_checks.scan.command import ScanRequest, run_scan  # lazy: reading graphs imports torch

    fields = {k.removeprefix("scan_"): v for k, v in vars(args).items() if k.startswith("scan_")}
    fields["paths"], fields["imports"] = tuple(fields["paths"]), tuple(fields["imports"])
    return run_scan(ScanRequest(**fields))


def _run(args: argparse.Namespace) -> int:
    command = args.command or "gate"
    if command == "report":
        return _report(args)
    if command == "merge":
        if any(getattr(args, _dest(f, kw)) is not None for f, kw in _RUN_OPTIONS):
            raise UsageError("merge takes its own options after the subcommand: compile-checks merge --help")
        from compile_checks.gate.merge import run_merge  # here: merging imports the gate's writers

        return run_merge(args)
    if command == "scan":
        return _scan(args)
    _check_run_options(args, command)
    config = _config(args)
    mode = _gate_mode(args, command, config)
    # here, not at the top: running the gate imports torch (--help and usage errors stay torch-free)
    from compile_checks.gate.commands import run_gate, run_list

    return run_list(args, mode, config) if command == "list" else run_gate(args, command, mode, config)


def _reports_installed() -> bool:
    try:
        import compile_checks.reports  # noqa: F401  (torch-free: a docstring)
    except ImportError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (console script ``compile-checks``); returns the exit code, never a traceback."""
    return int(_main(list(sys.argv[1:] if argv is None else argv)))


def _main(argv: list[str]) -> int:
    if argv[:1] == ["report"] and not _reports_installed():
        print(
            "error: compile-checks report needs compile_checks.reports, which this install does not have",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    try:
        args = _merge(_parser().parse_args(argv))
    except SystemExit as e:  # argparse printed its usage line (or --help)
        return ExitCode.USAGE if e.code not in (0, None) else ExitCode.CLEAN
    held = HeldStderr()
    try:  # torch's, vLLM's and the cases' stderr held, shown when the run fails (gate/stderr_noise.py)
        with held_stderr(wanted(bool(getattr(args, "verbose", False)))) as held:
            code = _run(args)
    except UsageError as e:
        held.show(failed=True)
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except UnwritableOutput as e:
        held.show(failed=True)
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.UNWRITABLE
    except KeyboardInterrupt:
        held.show(failed=True)
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BaseException:
        held.show(failed=True)
        raise
    held.show(failed=code != ExitCode.CLEAN)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
