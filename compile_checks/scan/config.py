"""``[tool.compile_checks.scan]``: what the scan expects of each graph, so CI can gate on a trace.

.. code-block:: toml

    [tool.compile_checks.scan]
    expect_clean = true                 # default for every graph
    graphs = {"0/1" = false}            # per graph (compile id or label): a negative control
    pools = {"layer0.v" = false}        # per pool (named with --pools / pools_file)
    pools_file = "pools.toml"           # the [pools] input -> pool mapping (relative to pyproject.toml)

A pool listed in ``pools`` is judged on its own (one result row per pool, over every graph): its
copies do not count against the graph they are in. ``false`` means the pool must keep being
copied (the scan must still see the bug); ``true`` that no graph copies it.

The table is a pydantic model, :class:`ScanConfig` (its field descriptions generate the docs'
reference); a bad table is a usage error (exit 2) naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, ValidationInfo, field_validator

from compile_checks.errors import UsageError
from compile_checks.gate.config import ConfigError, read_table, table_problems


class ScanConfig(BaseModel):
    """``[tool.compile_checks.scan]``, validated (every key optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expect_clean: StrictBool = Field(True, description="what every graph must be: true clean, false still copying")
    graphs: dict[str, StrictBool] = Field(
        default_factory=dict,
        description="per graph (compile id such as '0/1', or its label): true clean, false a negative control",
    )
    pools: dict[str, StrictBool] = Field(
        default_factory=dict,
        description="per pool (named by --pools / pools_file), judged over every graph: true never copied, "
        "false still copied",
    )
    pools_file: Path | None = Field(
        None, description="the [pools] table (graph input -> pool name), relative to this file's folder"
    )

    @field_validator("pools_file", mode="before")
    @classmethod
    def _relative_to_the_file(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value  # pydantic's path_type error
        return Path((info.context or {}).get("path", "pyproject.toml")).parent / value

    def expects_clean(self, compile_id: str, label: str) -> bool:
        for key in (label, compile_id):
            if key in self.graphs:
                return self.graphs[key]
        return self.expect_clean


def load_scan_config(pyproject: Path | None) -> ScanConfig:
    """The table of ``pyproject`` (``./pyproject.toml`` when None); defaults when it has none."""
    path = pyproject or Path.cwd() / "pyproject.toml"
    if not path.is_file():
        if pyproject is not None:
            raise UsageError(f"--config {pyproject}: no such file")
        return ScanConfig()
    try:
        table = read_table(path, "compile_checks", "scan")
        if table is None:
            return ScanConfig()
        return ScanConfig.model_validate(table, context={"path": path})
    except ConfigError as e:
        raise UsageError(str(e)) from None
    except ValidationError as e:
        raise UsageError(table_problems(e, ScanConfig, path, "tool.compile_checks.scan")) from None


__all__ = ["ScanConfig", "load_scan_config"]
