"""Output folders are checked before anything compiles: a run that fails to write its results
after minutes of compiling wastes the minutes (CLI exit 3, report / bench exit 3)."""

from __future__ import annotations

from pathlib import Path

from compile_checks.errors import UnwritableOutput
from compile_checks.gate.stderr_noise import terminal


def writable_dir_problem(path: Path) -> str | None:
    """None if ``path`` can be created and written, else why not.

    Creates ``path`` and writes a probe file there: ``os.access`` says yes to root on
    read-only mounts, a real write does not.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".compile_checks_write_probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        return f"cannot write to {path}: {e.strerror or e}"
    return None


def check_writable_dir(path: Path, what: str = "") -> None:
    """Raise UnwritableOutput (exit 3) before anything compiles when ``path`` cannot hold output;
    ``what``: the option that named it (``--dump-dir``), said in the message."""
    problem = writable_dir_problem(path)
    if problem is not None:
        raise UnwritableOutput(f"{what} {path}: {problem}" if what else problem)


def check_writable_file(path: Path, what: str = "--junitxml") -> None:
    """Raise UnwritableOutput (exit 3) naming the file when ``path`` cannot be written; a missing folder
    is created now (before anything compiles) and said on stderr."""
    if path.is_dir():
        raise UnwritableOutput(f"{what} {path}: cannot write to it: is a directory")
    missing = not path.parent.exists()
    problem = writable_dir_problem(path.parent)
    if problem is not None:
        raise UnwritableOutput(f"{what} {path}: {problem}")
    if missing:
        print(f"{what} {path}: created its missing folder {path.parent}", file=terminal(), flush=True)


__all__ = ["check_writable_dir", "check_writable_file", "writable_dir_problem"]
