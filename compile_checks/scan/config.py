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
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compile_checks.errors import UsageError

KNOWN_KEYS: dict[str, type] = {"expect_clean": bool, "graphs": dict, "pools": dict, "pools_file": str}


@dataclass(frozen=True)
class ScanConfig:
    expect_clean: bool = True
    graphs: dict[str, bool] = field(default_factory=dict)
    pools: dict[str, bool] = field(default_factory=dict)
    pools_file: Path | None = None

    def expects_clean(self, compile_id: str, label: str) -> bool:
        for key in (label, compile_id):
            if key in self.graphs:
                return self.graphs[key]
        return self.expect_clean


def _bools(path: Path, key: str, table: Any) -> dict[str, bool]:
    if not all(isinstance(v, bool) for v in table.values()):
        raise UsageError(f"{path}: [tool.compile_checks.scan] {key} must map names to true / false")
    return {str(k): v for k, v in table.items()}


def load_scan_config(pyproject: Path | None) -> ScanConfig:
    """The table of ``pyproject`` (``./pyproject.toml`` when None); defaults when it has none."""
    path = pyproject or Path.cwd() / "pyproject.toml"
    if not path.is_file():
        if pyproject is not None:
            raise UsageError(f"--config {pyproject}: no such file")
        return ScanConfig()
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML: {e}") from None
    table = data.get("tool", {}).get("compile_checks", {}).get("scan")
    if table is None:
        return ScanConfig()
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        raise UsageError(
            f"{path}: unknown key(s) in [tool.compile_checks.scan]: {', '.join(unknown)}; "
            f"valid: {', '.join(KNOWN_KEYS)}"
        )
    for key, want in KNOWN_KEYS.items():
        if key in table and not isinstance(table[key], want):
            raise UsageError(f"{path}: [tool.compile_checks.scan] {key} must be a {want.__name__}")
    return ScanConfig(
        expect_clean=table.get("expect_clean", True),
        graphs=_bools(path, "graphs", table.get("graphs", {})),
        pools=_bools(path, "pools", table.get("pools", {})),
        pools_file=path.parent / table["pools_file"] if "pools_file" in table else None,
    )


__all__ = ["KNOWN_KEYS", "ScanConfig", "load_scan_config"]
