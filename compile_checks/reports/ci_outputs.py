"""The report's CI outputs, as the gate has them: ``report --json`` (a versioned document on stdout) and
``report --junitxml`` (one ``<testcase>`` per case; a failure: the case grew against ``--baseline``).

The document holds the rows traffic.csv holds (``cases``, plain JSON values) and the baseline comparison
(``baseline``: null without ``--baseline``). A run that failed before its table (a case raised: exit 4)
writes one ``<error>`` testcase named ``report`` and a document with ``error``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from compile_checks.gate.junit import write_testsuites
from compile_checks.reports.baseline import Comparison

SCHEMA_VERSION = 1


def _rows(df: Any) -> list[dict[str, Any]]:
    """traffic.csv's rows with plain JSON values (NaN -> null; numpy numbers -> int / float)."""
    return list(json.loads(df.to_json(orient="records")))


def comparison_dict(cmp: Comparison | None, baseline: Path | None) -> dict[str, Any] | None:
    if cmp is None:
        return None
    return {
        "path": str(baseline),
        "ok": cmp.ok,
        "regressions": [r.describe() for r in cmp.regressions],
        "improved": list(cmp.improved),
        "new": list(cmp.new_scenarios),
    }


def json_document(
    df: Any, *, exit_code: int, seconds: float, cmp: Comparison | None, baseline: Path | None, error: str | None = None
) -> str:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "command": "report",
        "exit_code": exit_code,
        "seconds": round(seconds, 3),
        "error": error,
        "cases": [] if df is None else _rows(df),
        "baseline": comparison_dict(cmp, baseline),
    }
    return json.dumps(doc, indent=2)


def write_junit(path: Path, df: Any, *, seconds: float, cmp: Comparison | None, error: str | None = None) -> None:
    """One testcase per row (``name``: the case's label); a row that grew against the baseline fails."""
    regressed = {r.scenario: r.describe() for r in (cmp.regressions if cmp is not None else [])}
    rows = [] if df is None else _rows(df)
    suite = ET.Element(
        "testsuite",
        name="compile-checks-report",
        tests=str(len(rows) + int(error is not None)),
        failures=str(len(regressed)),
        errors=str(int(error is not None)),
        time=f"{seconds:.3f}",
    )
    if error is not None:
        ET.SubElement(ET.SubElement(suite, "testcase", classname="report", name="report"), "error", message=error)
    for row in rows:
        tc = ET.SubElement(suite, "testcase", classname=f"report/{row.get('pipeline') or 'stock'}", name=row["case"])
        props = ET.SubElement(tc, "properties")
        for key in ("surviving_clones", "extra_bytes_per_step", "traffic_ratio"):
            if key in row:
                ET.SubElement(props, "property", name=key, value=json.dumps(row[key]))
        if row["case"] in regressed:
            message = f"grew against the baseline: {regressed[row['case']]}"
            ET.SubElement(tc, "failure", message=message, type="baseline").text = message
        ET.SubElement(tc, "system-out").text = str(row.get("verdict", ""))
    write_testsuites(suite, path)


__all__ = ["SCHEMA_VERSION", "json_document", "write_junit"]
