"""``[tool.compile_checks]`` in a project's ``pyproject.toml``: the gate's defaults for a team.

Read with :mod:`tomllib` only (no torch import): a bad table is a usage error the CLI
reports before anything compiles. Every key is checked; an unknown key is an error that
names it, so a typo (``target = ...``) never silently falls back to the built-in gate.
Relative paths in the table are taken from the directory that holds the ``pyproject.toml``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compile_checks.errors import CompileChecksError
from compile_checks.vocab import PIPELINES

# key -> (expected Python type, what it means); the docs' configuration page is generated from it
KNOWN_KEYS: dict[str, tuple[type, str]] = {
    "targets": (list, "cases to gate: 'path/file.py:NAME' or 'package.module:NAME'"),
    "pipelines": (list, f"re-run every case under each of these pipelines ({', '.join(PIPELINES)})"),
    "full": (bool, "compile every case fully (default: analysis-only verdicts)"),
    "junitxml": (str, "write a JUnit XML report here"),
    "dump_dir": (str, "write depyf dumps + index.md per case under this directory"),
    "inductor_cache": (
        str,
        "also run every case against the Inductor caches in this directory (gate --inductor-cache)",
    ),
    "scan": (dict, "[tool.compile_checks.scan]: what `compile-checks scan` expects (compile_checks.scan.config)"),
}


class ConfigError(CompileChecksError, ValueError):
    """The ``[tool.compile_checks]`` table is malformed (the CLI exits 2)."""


@dataclass(frozen=True)
class GateConfig:
    """The validated table; ``None``/empty means "not set" (CLI flags and built-ins apply)."""

    path: Path
    targets: tuple[str, ...] = ()
    pipelines: tuple[str, ...] = ()
    full: bool = False
    junitxml: Path | None = None
    dump_dir: Path | None = None
    inductor_cache: Path | None = None

    @property
    def base_dir(self) -> Path:
        return self.path.parent


def _check_type(path: Path, key: str, value: Any) -> None:
    want, _ = KNOWN_KEYS[key]
    if not isinstance(value, want):
        raise ConfigError(f"{path}: [tool.compile_checks] {key} must be a {want.__name__}, got {type(value).__name__}")
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: [tool.compile_checks] {key} must be a list of strings")


def load_config(pyproject: str | Path) -> GateConfig | None:
    """The table of ``pyproject`` (a file); None when the file or the table does not exist."""
    path = Path(pyproject)
    if not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    table = data.get("tool", {}).get("compile_checks")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.compile_checks] must be a table")
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) in [tool.compile_checks]: {', '.join(unknown)}; valid: {', '.join(KNOWN_KEYS)}"
        )
    for key, value in table.items():
        _check_type(path, key, value)
    for key in ("targets", "pipelines"):
        if key in table and not table[key]:
            # an empty list is not "unset": it would silently gate the built-in scenarios instead
            raise ConfigError(f"{path}: [tool.compile_checks] {key} is empty; name at least one, or remove the key")
    bad = [p for p in table.get("pipelines", []) if p not in PIPELINES]
    if bad:
        raise ConfigError(
            f"{path}: [tool.compile_checks] pipelines: unknown {', '.join(bad)}; valid: {', '.join(PIPELINES)}"
        )
    base = path.parent

    def _path(key: str) -> Path | None:
        return base / table[key] if key in table else None

    return GateConfig(
        path=path,
        targets=tuple(table.get("targets", ())),
        pipelines=tuple(table.get("pipelines", ())),
        full=bool(table.get("full", False)),
        junitxml=_path("junitxml"),
        dump_dir=_path("dump_dir"),
        inductor_cache=_path("inductor_cache"),
    )


__all__ = ["KNOWN_KEYS", "ConfigError", "GateConfig", "load_config"]
