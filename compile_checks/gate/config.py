"""``[tool.compile_checks]`` in a project's ``pyproject.toml``: the gate's defaults for a team.

Read with :mod:`tomllib` (no torch import) and validated by a pydantic model, :class:`GateConfig`,
whose fields (types, defaults, descriptions) are the table's keys: the docs' configuration page is
generated from them. A bad table is a usage error the CLI reports (exit 2) before anything compiles,
naming the file and the key; an unknown key is an error that names it, so a typo (``target = ...``)
never silently falls back to the built-in gate. Relative paths in the table are taken from the
directory that holds the ``pyproject.toml``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, StrictStr, ValidationError, field_validator
from pydantic import ValidationInfo as _Info

from compile_checks.errors import CompileChecksError
from compile_checks.vocab import Pipeline


class ConfigError(CompileChecksError, ValueError):
    """The ``[tool.compile_checks]`` table is malformed (the CLI exits 2)."""


# what a key of the wrong type must be, by pydantic's error type (a nested location: an item of a list or table)
_MUST_BE = {
    "bool_type": "a bool (true / false)",
    "string_type": "a string",
    "tuple_type": "a list",
    "list_type": "a list",
    "dict_type": "a table",
    "path_type": "a string (a path)",
}
_ITEMS = {"bool_type": "true / false", "string_type": "strings", "dict_type": "tables", "path_type": "paths"}


def table_problems(error: ValidationError, model: type[BaseModel], path: Path, table: str) -> str:
    """pydantic's errors as the CLI says them: one line per problem, each naming ``path``, ``[table]`` and the key."""
    unknown = [str(e["loc"][0]) for e in error.errors() if e["type"] == "extra_forbidden"]
    lines = []
    if unknown:
        lines.append(
            f"{path}: unknown key(s) in [{table}]: {', '.join(unknown)}; valid: {', '.join(model.model_fields)}"
        )
    for e in error.errors():
        kind, loc = e["type"], e["loc"]
        key = str(loc[0]) if loc else "?"
        if kind == "extra_forbidden":
            continue
        if kind == "too_short":
            why = "is empty; name at least one, or remove the key"
        elif kind == "enum":
            why = f"unknown {e['input']!r}; valid: {e['ctx']['expected']}"
        elif kind in _MUST_BE and len(loc) > 1:
            container = model.model_fields[key].annotation
            what = "map names to" if "dict" in str(container) else "be a list of"
            why = f"must {what} {_ITEMS.get(kind, 'values')}, got {type(e['input']).__name__} at {loc[1]!r}"
        elif kind in _MUST_BE:
            why = f"must be {_MUST_BE[kind]}, got {type(e['input']).__name__}"
        else:
            why = f"{e['msg']} (got {e['input']!r})"
        lines.append(f"{path}: [{table}] {key} {why}")
    return "\n".join(dict.fromkeys(lines))


def read_table(path: Path, *keys: str) -> dict[str, Any] | None:
    """``[tool.<keys>]`` of the TOML file ``path`` (None: no such table); ConfigError when unreadable."""
    try:
        with path.open("rb") as f:
            data: Any = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    for key in ("tool", *keys):
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: [tool.{'.'.join(keys)}] must be a table")
        data = data.get(key)
        if data is None:
            return None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: [tool.{'.'.join(keys)}] must be a table")
    return data


class GateConfig(BaseModel):
    """``[tool.compile_checks]``, validated; empty / None means "not set" (CLI flags and built-ins apply)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    targets: tuple[StrictStr, ...] = Field(
        (),
        min_length=1,
        description="cases to gate: 'path/file.py:NAME' or 'package.module:NAME' (relative to this file's folder)",
    )
    pipelines: tuple[Pipeline, ...] = Field(
        (),
        min_length=1,
        description=f"re-run every case under each of these pipelines ({', '.join(p.value for p in Pipeline)})",
    )
    full: StrictBool = Field(False, description="compile every case fully (default: analysis-only verdicts)")
    junitxml: Path | None = Field(None, description="write a JUnit XML report here")
    dump_dir: Path | None = Field(None, description="write depyf dumps + index.md per case under this directory")
    inductor_cache: Path | None = Field(
        None, description="also run every case against the Inductor caches in this directory (gate --inductor-cache)"
    )
    fail_on_program_copies: StrictBool = Field(
        False,
        description="fail a case on the pool-sized buffers its program makes from a pool (a roll, a copy of the "
        "window): gate --fail-on-program-copies; reported, never failing, otherwise",
    )
    scan: dict[str, Any] | None = Field(
        None, description="[tool.compile_checks.scan]: what `compile-checks scan` expects (its own table, below)"
    )
    _path: Path = PrivateAttr(default=Path("pyproject.toml"))

    @field_validator("junitxml", "dump_dir", "inductor_cache", mode="before")
    @classmethod
    def _relative_to_the_file(cls, value: Any, info: _Info) -> Any:
        if not isinstance(value, str):
            return value  # pydantic's path_type error: "must be a string (a path)"
        base = Path((info.context or {}).get("path", "pyproject.toml")).parent
        return base / value

    def model_post_init(self, context: Any, /) -> None:
        if isinstance(context, Mapping) and "path" in context:
            self._path = Path(context["path"])

    @classmethod
    def from_table(cls, path: Path, table: Mapping[str, Any]) -> GateConfig:
        """The validated table of the file ``path``; ConfigError naming the file and every bad key."""
        try:
            return cls.model_validate(dict(table), context={"path": path})
        except ValidationError as e:
            raise ConfigError(table_problems(e, cls, path, "tool.compile_checks")) from None

    @property
    def path(self) -> Path:
        """The ``pyproject.toml`` the table came from."""
        return self._path

    @property
    def base_dir(self) -> Path:
        return self._path.parent


def load_config(pyproject: str | Path) -> GateConfig | None:
    """The table of ``pyproject`` (a file); None when the file or the table does not exist."""
    path = Path(pyproject)
    if not path.is_file():
        return None
    table = read_table(path, "compile_checks")
    return None if table is None else GateConfig.from_table(path, table)


__all__ = ["ConfigError", "GateConfig", "load_config", "read_table", "table_problems"]
