"""``compile-checks`` / ``python -m compile_checks``: gate cases for pool clones, exit with a meaning.

One parser (its grammar: :mod:`compile_checks.cli_parser`), seven subcommands: ``gate [TARGET...]``
(the default), ``list``, ``dump``, ``report``, ``merge OUT.json...`` (the ``gate --shard K/N --json``
outputs of a CI matrix as one run), ``scan PATH...`` (audit logged compiles: :mod:`compile_checks.scan`) and
``repro TARGET`` (one standalone torch-only file for an upstream issue: :mod:`compile_checks.gate.repro`).
The gate's options work before or after the subcommand (``compile-checks --json gate`` ==
``compile-checks gate --json``); the report's options follow ``report``. ``--help`` and usage
errors answer without importing torch.

The mode (:class:`~compile_checks.vocab.Mode`) is resolved here, once, from ``--full`` /
``--analysis-only`` (and ``[tool.compile_checks] full``): ``analysis`` (the gate's default:
analysis-only verdicts plus the built-in codegen smoke), ``analysis-only`` (no codegen at all; the
report's default, as the report has no smoke), ``full`` (every case compiled fully; ``dump`` always).
``--full`` with ``--analysis-only`` is a usage error, on ``gate`` and ``report`` alike.

Exit codes, every subcommand (the docs' exit-code page is generated from this table, checked against
:class:`~compile_checks.vocab.ExitCode`):
    0    every case met its expectation (clean cases clean, negative controls still cloning);
         report: written, and nothing grew against ``--baseline``
    1    some case did not (a surviving clone, or a negative control that stopped cloning);
         report: a case's clones or extra bytes grew against ``--baseline``
    2    usage error: bad option, unknown scenario, bad target, bad ``[tool.compile_checks]`` table,
         a pool named twice or overlapping another (found when its case runs),
         engine: no model folder, ``--max-tokens`` below 1, bad ``--llm-kwargs``, an engine that compiles nothing,
         report: unreadable or invalid baseline / bench CSV, the report extra not installed
    3    an output path (``--junitxml``, ``--dump-dir``, ``--out``, ``--write-baseline``, ``engine --json``)
         cannot be written
    4    a case failed to compile (or the check itself failed); one line per case says why;
         engine: vLLM refused the configuration or crashed, one line says why
    5    every verdict met, but a compiled run differs from its eager reference
    130  interrupted (Ctrl-C)
When several apply, the first in the order 2, 3, 4, 1, 5 wins. Usage and output problems are found
before anything compiles.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from compile_checks.cli_parser import NOT_FOR_LIST, RUN_OPTIONS, dest_of, merged, parser
from compile_checks.errors import UnwritableOutput, UsageError
from compile_checks.gate.config import ConfigError, GateConfig, load_config
from compile_checks.gate.stderr_noise import HeldStderr, held_stderr, wanted
from compile_checks.vocab import ExitCode, Mode

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
        used = sorted(k for k in NOT_FOR_LIST if getattr(args, k) is not None)
        if used:
            raise UsageError(f"list does not take {', '.join('--' + k.replace('_', '-') for k in used)}")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    if getattr(args, "targets", None) and args.scenario:
        raise UsageError("give TARGETs or --scenario, not both")
    if command == "dump":
        _dump_folder(args)
    if args.shard is not None:
        from compile_checks.gate.shard import Shard  # torch-free: a bad K/N is answered before anything loads

        Shard.parse(args.shard)


def _dump_folder(args: argparse.Namespace) -> None:
    """``dump``'s folder is ``--out``; ``--dump-dir`` (the gate's option) is its deprecated alias there,
    said on stderr; both at once is a usage error."""
    if args.dump_dir is not None and args.out is not None:
        raise UsageError("dump writes into --out DIR; --dump-dir is its deprecated alias: give one, not both")
    if args.dump_dir is not None:
        print("warning: dump --dump-dir is deprecated: use --out", file=sys.stderr)
        args.out, args.dump_dir = args.dump_dir, None
    if args.out is None:
        raise UsageError("dump needs --out DIR (the dumps' folder)")


def _report(args: argparse.Namespace) -> int:
    if any(getattr(args, dest_of(f, kw)) is not None for f, kw in RUN_OPTIONS):
        raise UsageError("report takes its own options after the subcommand: compile-checks report --help")
    mode = resolve_mode(args.report_full, args.report_analysis_only, Mode.ANALYSIS_ONLY)
    # here, not at the top: --help and usage errors stay torch-free (and a missing room is answered)
    from compile_checks.reports.command import ReportRequest, run_report

    fields = {k.removeprefix("report_"): v for k, v in vars(args).items() if k.startswith("report_")}
    del fields["full"], fields["analysis_only"], fields["verbose"]  # the mode above; --verbose: main's
    alias = fields.pop("target_alias")
    if alias:  # the old spelling: still works, said on stderr
        print("warning: report --target is deprecated: give TARGETs positionally, as to gate", file=sys.stderr)
        fields["targets"] = [*(fields["targets"] or ()), *alias]
    fields["progress"] = not fields.pop("no_progress")
    for key in ("targets", "scenarios", "pipelines"):
        fields[key] = tuple(fields[key] or ())
    return run_report(ReportRequest(mode=mode, **fields))


def _scan(args: argparse.Namespace) -> int:
    if any(getattr(args, dest_of(f, kw)) is not None for f, kw in RUN_OPTIONS):
        raise UsageError("scan takes its own options after the subcommand: compile-checks scan --help")
    missing = [str(p) for p in args.scan_paths if not p.exists()]
    if missing:  # before torch loads, as every usage error
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    from compile_checks.scan.command import ScanRequest, run_scan  # lazy: reading graphs imports torch

    fields = {k.removeprefix("scan_"): v for k, v in vars(args).items() if k.startswith("scan_")}
    fields["paths"], fields["imports"] = tuple(fields["paths"]), tuple(fields["imports"])
    del fields["verbose"]  # main's: torch's stderr streamed, not held
    return run_scan(ScanRequest(**fields))


def _repro(args: argparse.Namespace) -> int:
    if any(getattr(args, dest_of(f, kw)) is not None for f, kw in RUN_OPTIONS):
        raise UsageError("repro takes its own options after the subcommand: compile-checks repro --help")
    from compile_checks.gate.repro import run_repro  # lazy: running the case imports torch

    try:
        path = run_repro(args.repro_target, args.repro_case, args.repro_out)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(f"wrote {path}: run it with python (exit 1: reproduced; 2: the gate's finding not reproduced; 0: ok)")
    return ExitCode.CLEAN


def _run(args: argparse.Namespace) -> int:
    command = args.command or "gate"
    if command == "repro":
        return _repro(args)
    if command == "report":
        return _report(args)
    if command == "merge":
        if any(getattr(args, dest_of(f, kw)) is not None for f, kw in RUN_OPTIONS):
            raise UsageError("merge takes its own options after the subcommand: compile-checks merge --help")
        from compile_checks.gate.merge import run_merge  # here: merging imports the gate's writers

        return run_merge(args)
    if command == "scan":
        return _scan(args)
    if command == "engine":
        from compile_checks.pipelines.vllm_engine_command import run_engine  # lazy: imports torch and vLLM

        return run_engine(args)
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
    """Entry point (console script ``compile-checks``); returns the exit code, never a traceback.

    Without ``argv`` (the console script, ``python -m compile_checks``) the process is the gate's own
    (``gate.one_case.own_this_process``); ``main([...])`` from another program leaves its process alone."""
    if argv is None:
        from compile_checks.gate.one_case import own_this_process

        own_this_process()
    return int(_main(list(sys.argv[1:] if argv is None else argv)))


def _main(argv: list[str]) -> int:
    if argv[:1] == ["report"] and not _reports_installed():
        print(
            "error: compile-checks report needs compile_checks.reports, which this install does not have",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    try:
        args = merged(parser().parse_args(argv))
    except SystemExit as e:  # argparse printed its usage line (or --help)
        return ExitCode.USAGE if e.code not in (0, None) else ExitCode.CLEAN
    held = HeldStderr()
    try:  # torch's, vLLM's and the cases' stderr held, shown when the run fails (gate/stderr_noise.py)
        verbose = any(getattr(args, k, None) for k in ("verbose", "report_verbose", "scan_verbose"))
        with held_stderr(wanted(verbose)) as held:
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
