"""One exception root: ``except CompileChecksError`` catches every error this package raises.

Each public error also keeps its historical builtin base (``ValueError`` for bad input,
``RuntimeError`` for a failed compile or an incompatible torch) so existing handlers still match.
"""

from __future__ import annotations


class CompileChecksError(Exception):
    """Root of every error raised by :mod:`compile_checks`."""


class UsageError(CompileChecksError, ValueError):
    """Bad arguments, targets or config (the CLI's exit 2)."""


class UnwritableOutput(CompileChecksError, OSError):
    """An output path (``--junitxml``, ``--dump-dir``, ``--out``) cannot be written (exit 3)."""


__all__ = ["CompileChecksError", "UnwritableOutput", "UsageError"]
