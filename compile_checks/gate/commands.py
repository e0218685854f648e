"""The gate's subcommands (``gate``, ``dump``, ``list``): plan, shard, run through the runner, print, exit code.

:mod:`compile_checks.cli` parses the command line and resolves the run's
:class:`~compile_checks.vocab.Mode` and ``[tool.compile_checks]`` table once; these handlers take
them as given. Bad input raises :class:`~compile_checks.errors.UsageError`, an output that cannot
be written :class:`~compile_checks.errors.UnwritableOutput`; the CLI turns both into exit codes.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_checks.errors import UnwritableOutput, UsageError
from compile_checks.gate.junit import write_junit
from compile_checks.gate.outcome import Outcome, note_pipeline_verdicts
from compile_checks.gate.outdir import check_writable_dir, check_writable_file
from compile_checks.gate.outputs import json_document, print_results
from compile_checks.gate.plan import GatePlan, plan_builtin, plan_targets
from compile_checks.gate.run_options import RunOptions
from compile_checks.gate.runner import AUTO_JOBS_MIN_CASES, Workers, auto_jobs, run_plan
from compile_checks.gate.shard import Shard, shard_plan
from compile_checks.gate.targets import TargetError
from compile_checks.gate.timing import import_torch_comparison, import_torch_seconds, process_seconds, progress_callback
from compile_checks.gate.warm_cache import check_warm_caches
from compile_checks.pipelines.vllm_env import prepare_process_for_vllm
from compile_checks.vocab import ErrorKind, ExitCode, Mode

if TYPE_CHECKING:
    from compile_checks.gate.config import GateConfig


def stdout_gone() -> None:
    """After a BrokenPipeError (``| head``): point stdout at /dev/null so the exit flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def plan(args: argparse.Namespace, command: str, mode: Mode, config: GateConfig | None) -> GatePlan:
    """The cases to run: TARGETs, else the table's targets (unless --scenario), else built-ins.

    ``dump`` compiles each case once, under its own pipeline (the built-in scenarios: stock), unless
    ``--pipeline`` says otherwise: the table's ``pipelines`` are a gate's, a full compile per pipeline
    per case is minutes of dumps nobody asked for.
    """
    targets = list(getattr(args, "targets", []) or [])
    # the table's defaults (pipelines, full, junitxml, dump_dir) hold for TARGETs and --scenario
    # runs too; only its `targets` give way to the command line's
    pipelines = list(args.pipeline or (config.pipelines if config and command != "dump" else ()))
    # before any target or scenario can import vLLM: on a CPU-only host its platform must resolve as CPU
    prepare_process_for_vllm()
    try:
        if not checks_builtin(args, config):
            specs = targets or list(config.targets)  # type: ignore[union-attr]
            base = Path.cwd() if targets else config.base_dir  # type: ignore[union-attr]
            planned = plan_targets(specs, base, pipelines, mode=mode, own_pipeline=command == "dump")
        elif command == "dump" and not args.scenario:
            raise UsageError("dump needs TARGETs or --scenario NAME")
        else:
            if command == "dump":
                pipelines = pipelines or ["stock"]
            planned = plan_builtin(args.scenario or [], pipelines, mode=mode)
    except (TargetError, ValueError) as e:
        if isinstance(e, UsageError):
            raise
        raise UsageError(str(e)) from None
    patterns = getattr(args, "dump_filter", None)
    return select_cases(planned, patterns) if patterns else planned


def select_cases(gate_plan: GatePlan, patterns: Sequence[str]) -> GatePlan:
    """``dump -k PATTERN``: the planned cases whose label contains a pattern or matches it as a glob;
    none is a usage error naming the labels there are."""
    keep = [c for c in gate_plan.cases if any(p in c.label or fnmatch.fnmatchcase(c.label, p) for p in patterns)]
    if not keep:
        labels = ", ".join(c.label for c in gate_plan.cases)
        raise UsageError(f"-k {' / '.join(patterns)} matches no case; the cases: {labels}")
    gate_plan.cases = keep
    return gate_plan


def exit_code(outcomes: Sequence[Any]) -> ExitCode:
    """The run's exit code: the first of 2, 3, 4, 1, 5 that applies (the table in compile_checks.cli)."""
    if any(o.error_kind == ErrorKind.USAGE for o in outcomes):
        return ExitCode.USAGE
    if any(o.error_kind == ErrorKind.UNWRITABLE for o in outcomes):
        return ExitCode.UNWRITABLE
    if any(o.error_kind == ErrorKind.COMPILE for o in outcomes):
        return ExitCode.COMPILE
    if any(not o.verdict_met for o in outcomes):
        return ExitCode.NOT_MET
    if any(o.eager_match is False for o in outcomes):
        return ExitCode.MISMATCH
    return ExitCode.CLEAN


def sharded(args: argparse.Namespace, gate_plan: GatePlan) -> tuple[GatePlan, dict[str, Any] | None]:
    """``--shard K/N``: this shard's part of the plan and its JSON ``shard`` entry; else the plan as is."""
    if args.shard is None:
        if args.shard_timings is not None:
            raise UsageError("--shard-timings balances --shard: give --shard K/N too")
        return gate_plan, None
    timings = Path(args.shard_timings) if args.shard_timings is not None else None
    return shard_plan(gate_plan, Shard.parse(args.shard), timings)


def checks_builtin(args: argparse.Namespace, config: GateConfig | None) -> bool:
    """The run checks built-in scenarios (as :func:`plan` decides: no TARGET, and the table's targets give
    way to ``--scenario``), so a worker imports them while this process plans."""
    return not (getattr(args, "targets", None) or (config is not None and config.targets and not args.scenario))


def early_jobs(args: argparse.Namespace, command: str, config: GateConfig | None) -> int:
    """The ``--jobs`` this run will have, when it is known before planning: ``--jobs N``, or the built-in
    gate's auto value (it has more than AUTO_JOBS_MIN_CASES cases); else 1 (start no worker early)."""
    if args.jobs is not None:
        return int(args.jobs)
    builtin_gate = command == "gate" and checks_builtin(args, config) and not (args.scenario or args.shard)
    return auto_jobs(AUTO_JOBS_MIN_CASES) if builtin_gate else 1


def run_gate(args: argparse.Namespace, command: str, mode: Mode, config: GateConfig | None) -> ExitCode:
    """``gate`` / ``dump``: every planned case (of this ``--shard``) through the runner; table or JSON; JUnit."""
    # the unit of --timings' comparison, timed first: nothing else runs yet (as after the gate)
    import_torch = [import_torch_seconds()] if args.timings else []
    jobs = early_jobs(args, command, config)
    workers: Workers | None = None
    if jobs > 1:  # spawned first, before this process imports torch: a worker imports torch and vLLM
        # (after setting vLLM's platform itself, as prepare_process_for_vllm does here) while this process plans
        workers = Workers(jobs, builtin=checks_builtin(args, config))
    try:
        return _run_gate(args, command, mode, config, workers, import_torch)
    except BaseException:  # a usage or output error before the run (run_plan closes them otherwise)
        if workers is not None:
            workers.stop()
        raise


def _run_gate(
    args: argparse.Namespace,
    command: str,
    mode: Mode,
    config: GateConfig | None,
    workers: Workers | None,
    import_torch: list[float],
) -> ExitCode:
    gate_plan = plan(args, command, mode, config)
    if not gate_plan.cases:
        raise UsageError("nothing to check: the targets/scenarios name no cases")
    # a shard may hold no case (N > cases): it still answers, so `merge` sees every shard
    gate_plan, shard = sharded(args, gate_plan)
    options = RunOptions.resolve(args, command, config)
    gate_plan = options.applied(gate_plan)
    on_done, close = progress_callback(len(gate_plan.cases), not args.no_progress)
    t0 = time.perf_counter()
    try:
        jobs = options.jobs if options.jobs is not None else auto_jobs(len(gate_plan.cases))
        outcomes = run_plan(gate_plan, dump_root=options.dump_root, jobs=jobs, on_done=on_done, workers=workers)
    finally:
        close()
    check_warm_caches(gate_plan.cases, outcomes)  # --inductor-cache: what a warm cache serves (after the cold run)
    seconds = time.perf_counter() - t0
    note_pipeline_verdicts(outcomes)
    code = exit_code(outcomes)
    try:
        emit(outcomes, options, code=code, seconds=seconds, gate_plan=gate_plan, shard=shard, command=command)
        if import_torch:
            wall = process_seconds() or seconds
            print(import_torch_comparison(wall - import_torch[0], [*import_torch, import_torch_seconds()]))
    except BrokenPipeError:
        stdout_gone()
    return code


def emit(
    outcomes: Sequence[Outcome],
    options: RunOptions,
    *,
    code: int,
    seconds: float,
    gate_plan: GatePlan,
    shard: dict[str, Any] | None,
    command: str,
) -> None:
    """The run's outputs, each rendering the outcomes' one verdict: the JUnit file, then ``--json`` or the table."""
    if options.junit is not None:
        try:
            write_junit(outcomes, options.junit, seconds)
        except OSError as e:
            raise UnwritableOutput(f"cannot write {options.junit}: {e.strerror or e}") from None
    if options.json:
        print(json_document(outcomes, code, seconds, gate_plan.notes, extra={"shard": shard} if shard else None))
        return
    if shard is not None:
        print(f"shard {shard['index']}/{shard['count']}: {len(outcomes)} of {len(shard['plan_labels'])} case(s)")
    print_results(
        outcomes,
        title=f"compile-checks {command}",
        code=code,
        seconds=seconds,
        notes=gate_plan.notes,
        timings=options.timings,
        verbose=options.verbose,
    )
    if options.dump_root is not None:
        print(f"dumps: {options.dump_root}/<case>/index.md")


def run_list(args: argparse.Namespace, mode: Mode, config: GateConfig | None) -> ExitCode:
    """``list``: the built-in scenarios, or the plan the targets / the table / ``--pipeline`` / ``--shard``
    name (nothing compiles; a ``LazyCase`` is not built)."""
    if args.targets or args.scenario or args.pipeline or args.shard or (config is not None and config.targets):
        gate_plan, _ = sharded(args, plan(args, "list", mode, config))
        notes = gate_plan.notes
        rows: list[dict[str, Any]] = [
            {
                "name": p.label,
                "group": p.group,
                "pipeline": p.pipeline,
                "expect_clean": p.expect_clean,
                "mode": "analysis" if p.analysis_only else "full",
            }
            for p in gate_plan.cases
        ]
        lines = [
            f"{r['name']:28s} {r['group']:40s} {r['mode']:8s} expect {'clean' if r['expect_clean'] else 'clones'}"
            for r in rows
        ]
    else:
        # here, not at the top: importing the scenarios imports vLLM (after prepare_process_for_vllm only)
        notes = []
        prepare_process_for_vllm()
        from compile_checks.scenarios import DEFAULT_GATE, SCENARIOS

        rows = [
            {
                "name": s.name,
                "layout": s.layout,
                "expect_clean": s.expect_clean,
                "in_gate": s.name in DEFAULT_GATE,
                "description": s.description,
            }
            for s in SCENARIOS.values()
        ]
        lines = [
            f"{r['name']:28s} {'gate' if r['in_gate'] else '    '} expect {'clean ' if r['expect_clean'] else 'clones'}"
            f"  {r['description']}"
            for r in rows
        ]
    try:
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for line in lines + [f"note: {n}" for n in notes]:
                print(line)
        sys.stdout.flush()
    except BrokenPipeError:  # `compile-checks list | head`: the reader left; not an error
        stdout_gone()
    return ExitCode.CLEAN


__all__ = [
    "check_writable_dir",
    "check_writable_file",
    "emit",
    "exit_code",
    "plan",
    "run_gate",
    "run_list",
    "select_cases",
    "stdout_gone",
]
