"""The command line's grammar: the gate's options (before or after the subcommand), the subcommands
and their own options. Parsing only: :mod:`compile_checks.cli` resolves what they mean. Torch-free.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from compile_checks.vocab import PIPELINES

Option = tuple[tuple[str, ...], dict[str, Any]]


def _o(*flags: str, **kw: Any) -> Option:
    return flags, kw


# plain names in argparse's "invalid choice" message (the enum members would print as <Pipeline.STOCK: 'stock'>)
PIPELINE_NAMES: tuple[str, ...] = tuple(str(p) for p in PIPELINES)
_FLAG: dict[str, Any] = {"action": "store_const", "const": True}  # the gate's flags: None when not given

# the gate's options, accepted both before and after the subcommand; default None
RUN_OPTIONS: list[Option] = [
    _o("--json", **_FLAG, help="machine-readable output on stdout (schema_version 1)"),
    _o("--no-progress", **_FLAG, help="no progress on stderr (a bar on a terminal, else a line per finished case)"),
    _o("--config", metavar="PYPROJECT", help="read [tool.compile_checks] from this file (default ./pyproject.toml)"),
    _o("--scenario", action="append", metavar="NAME", help="built-in scenario(s) instead of the built-in gate"),
    _o("--pipeline", action="append", choices=PIPELINE_NAMES, help="run every case under this pipeline (repeatable)"),
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
    _o(
        "--floor",
        **_FLAG,
        help="also time each case the floor way (plain torch.compile stopped after post-grad) and the check's: "
        "seconds per region, check vs floor (about 3x the gate's compile time)",
    ),
    _o("--shard", metavar="K/N", help="run shard K of N of the plan (a stable split; `merge` joins the outputs)"),
    _o(
        "--shard-timings",
        metavar="JSON",
        help="balance --shard by each case's wall seconds in an earlier gate/merge --json output",
    ),
    _o(
        "--verbose",
        "-v",
        **_FLAG,
        help="every copy with its own explanation, negative controls' too (default: a passing control in one line, "
        "an explanation once per group of copies alike)",
    ),
    _o(
        "--fail-on-program-copies",
        **_FLAG,
        help="fail a case on the pool-sized buffers its program makes from a pool (a roll of a ring cache, a copy "
        "of the window; default: reported with their bytes, never failing)",
    ),
    _o(
        "--inductor-cache",
        metavar="DIR",
        help="also run each case against the Inductor/AOTAutograd caches in DIR (read, never written) and fail "
        "(cache_divergence) when the artifact they serve copies other bytes than a cold compile",
    ),
]
_APPENDS = {"scenario", "pipeline"}
NOT_FOR_LIST = {
    "full",
    "analysis_only",
    "junitxml",
    "dump_dir",
    "jobs",
    "timings",
    "floor",
    "verbose",
    "inductor_cache",
    "fail_on_program_copies",
}

# the report's options (after ``report`` only); dest = "report_" + the ReportRequest field
_REPORT_OPTIONS: list[Option] = [
    _o("--out", type=Path, metavar="DIR", help="output directory (created if missing); required unless --list"),
    _o(
        "--target",
        dest="target_alias",
        action="append",
        metavar="TARGET",
        help="deprecated: give TARGETs positionally, as to gate",
    ),
    _o(
        "--config",
        type=Path,
        metavar="PYPROJECT",
        help="read [tool.compile_checks] from this file (default ./pyproject.toml)",
    ),
    _o("--json", action="store_true", help="machine-readable output on stdout (schema_version 1); the rest on stderr"),
    _o(
        "--junitxml",
        type=Path,
        metavar="PATH",
        help="write a JUnit XML report (one testcase per case; a failure: growth against --baseline)",
    ),
    _o("--verbose", "-v", action="store_true", help="stream torch's and vLLM's stderr instead of holding it"),
    _o(
        "--scenario",
        dest="scenarios",
        action="append",
        metavar="NAME",
        help="built-in scenario (repeatable); default without targets: the traffic set",
    ),
    _o(
        "--pipeline",
        dest="pipelines",
        action="append",
        choices=PIPELINE_NAMES,
        help="run every case under this pipeline (repeatable; default: [tool.compile_checks] pipelines, "
        "else each case's own)",
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
    _o("--verbose", "-v", action="store_true", help="stream torch's stderr instead of holding it"),
]


def _add_case_filter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-k",
        dest="case_filter",
        action="append",
        metavar="PATTERN",
        help="only the cases whose label contains PATTERN or matches it as a glob (repeatable: any of them)",
    )


def dest_of(flags: tuple[str, ...], kw: dict[str, Any]) -> str:
    return kw.get("dest") or flags[0].lstrip("-").replace("-", "_")


def _add_run_options(parser: argparse.ArgumentParser, prefix: str) -> None:
    for flags, kw in RUN_OPTIONS:
        kw = dict(kw, dest=prefix + dest_of(flags, kw), default=None)
        if prefix:  # the subcommand's copy: shown once, in the subcommand's --help
            parser.add_argument(*flags, **kw)
        else:
            parser.add_argument(*flags, **{**kw, "help": argparse.SUPPRESS})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="compile-checks",
        description="Check that Inductor re-inplaces your engine's paged-KV writes (no pool-sized clones).",
        epilog="Exit codes: 0 all met, 1 not met, 2 usage, 3 unwritable output, 4 compile error, "
        "5 compiled != eager, 130 interrupted.",
    )
    _add_run_options(p, "")
    sub = p.add_subparsers(dest="command", metavar="{gate,list,dump,report,merge,scan,engine,repro,init}")
    target_help = "path/to/file.py:NAME or package.module:NAME (a Case, a list, or a zero-arg callable)"
    g = sub.add_parser("gate", help="check cases (targets, pyproject, or the built-in gate); the default")
    g.add_argument("targets", nargs="*", metavar="TARGET", help=target_help)
    _add_case_filter(g)
    _add_run_options(g, "sub_")
    ls = sub.add_parser(
        "list", help="list the built-in scenarios, or the plan the targets/pyproject/--pipeline/--shard name"
    )
    ls.add_argument("targets", nargs="*", metavar="TARGET", help=target_help)
    _add_case_filter(ls)
    _add_run_options(ls, "sub_")
    d = sub.add_parser(
        "dump", help="compile cases fully with depyf dumps and an index.md per case (each under its own pipeline)"
    )
    d.add_argument("targets", nargs="*", metavar="TARGET", help=target_help)
    d.add_argument("--out", metavar="DIR", help="the dumps' folder, one subfolder per case (required)")
    _add_case_filter(d)
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
        "cases (TARGETs, else [tool.compile_checks] targets of ./pyproject.toml) or the built-in scenarios "
        "(--scenario, or when there are no targets). Every case runs through run_case, as in the gate.",
    )
    r.add_argument("report_targets", nargs="*", metavar="TARGET", help=target_help)
    for flags, kw in _REPORT_OPTIONS:
        default = False if kw.get("action") == "store_true" else None
        r.add_argument(*flags, **dict(kw, dest="report_" + dest_of(flags, kw), default=default))
    rp = sub.add_parser(
        "repro",
        help="write one standalone file (torch only) that reproduces a case's pool copy or wrong write",
    )
    rp.add_argument("repro_target", metavar="TARGET", help=target_help)
    rp.add_argument("--case", dest="repro_case", metavar="NAME", help="the case, when the target has several")
    rp.add_argument("--out", dest="repro_out", type=Path, metavar="FILE", help="default: ./repro_<case>.py")
    s = sub.add_parser(
        "scan",
        help="audit logged compiles (TORCH_TRACE, Inductor debug folders, depyf/vLLM dumps) without re-running them",
    )
    s.add_argument("scan_paths", nargs="+", type=Path, metavar="PATH", help="a trace file or folder, or a dump folder")
    for flags, kw in _SCAN_OPTIONS:
        s.add_argument(*flags, **dict(kw, dest="scan_" + dest_of(flags, kw)))
    i = sub.add_parser(
        "init", help="write a cases.py (a clean case and its negative control) and the [tool.compile_checks] table"
    )
    i.add_argument("init_folder", nargs="?", type=Path, default=Path(), metavar="FOLDER", help="default: .")
    i.add_argument("--force", dest="init_force", action="store_true", help="overwrite an existing cases.py")
    from compile_checks.pipelines.vllm_engine_command import add_parser as add_engine_parser  # torch-free

    add_engine_parser(sub)
    return p


def merged(args: argparse.Namespace) -> argparse.Namespace:
    """Fold the subcommand's copies of the run options into the top-level ones."""
    for flags, kw in RUN_OPTIONS:
        dest = dest_of(flags, kw)
        sub_value = getattr(args, "sub_" + dest, None)
        if sub_value is None:
            continue
        top = getattr(args, dest)
        setattr(args, dest, (top or []) + sub_value if dest in _APPENDS else sub_value)
    return args


__all__ = ["NOT_FOR_LIST", "RUN_OPTIONS", "dest_of", "merged", "parser"]
