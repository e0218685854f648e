"""Output folders are checked before anything compiles: a run that fails to write its results
after minutes of compiling wastes the minutes (CLI exit 3, report / bench exit 3)."""

from __future__ import annotations

from pathlib import Path


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


__all__ = ["writable_dir_problem"]
