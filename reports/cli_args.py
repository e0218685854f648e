"""The benchmarks' shared argument checks: a usage error is reported before a benchmark runs, never after.

A benchmark runs for minutes; an ``--out`` it cannot write (a directory where a file is wanted, a file
where a folder is wanted, a read-only place) must stop it at once with argparse's usage error (exit 2),
not end the run in a traceback with nothing saved.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compile_checks.gate.outdir import writable_dir_problem


def out_dir(parser: argparse.ArgumentParser, path: Path, option: str = "--out") -> Path:
    """``path`` as the folder a benchmark writes into: created now, and written to once (a usage error else)."""
    if path.exists() and not path.is_dir():
        parser.error(f"{option} {path}: is a file; give the folder to write into")
    problem = writable_dir_problem(path)
    if problem is not None:
        parser.error(f"{option} {path}: {problem}")
    return path


def out_file(parser: argparse.ArgumentParser, path: Path, option: str = "--out", name: str = "results.json") -> Path:
    """``path`` as the file a benchmark writes at its end: not a folder, its folder writable (a usage error else);
    ``name``: the file name the error suggests inside a folder given instead."""
    if path.is_dir():
        parser.error(f"{option} {path}: is a directory; give the file to write (e.g. {path / name})")
    problem = writable_dir_problem(path.parent)
    if problem is not None:
        parser.error(f"{option} {path}: {problem}")
    return path


def positive(parser: argparse.ArgumentParser, option: str, *values: float) -> None:
    """A usage error unless every value of ``option`` is > 0."""
    bad = [v for v in values if not v > 0]
    if bad:
        parser.error(f"{option} must be > 0, got {bad[0]}")


__all__ = ["out_dir", "out_file", "positive"]
