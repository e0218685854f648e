"""The docs' reference pages are generated from the code (docs/hooks/reference.py): what they say follows
the parser, the tables and the enums, and a page that asks for a block nobody generates fails the build."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import reference as module
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    return module


def test_every_marker_in_the_docs_has_a_generator(reference: ModuleType) -> None:
    asked = {m.group(1) for p in (ROOT / "docs").rglob("*.md") for m in reference.MARKER.finditer(p.read_text())}
    assert asked and asked <= set(reference.GENERATORS)


def test_an_unknown_marker_fails_the_build(reference: ModuleType) -> None:
    """Negative control: a page asking for a block nobody generates is an error, never left as is."""
    with pytest.raises(KeyError, match="no-such-block"):
        reference.render("# Page\n\n<!-- generated: no-such-block -->\n")


def test_the_cli_page_follows_the_parser(reference: ModuleType) -> None:
    from compile_checks.cli_parser import RUN_OPTIONS

    page = reference.cli()
    for sub in ("gate", "list", "dump", "merge", "report", "scan"):
        assert f"## `compile-checks {sub}`" in page
    assert all(f"`{flags[0]}`" in page for flags, _ in RUN_OPTIONS)


def test_the_config_page_follows_the_validators(reference: ModuleType) -> None:
    """Every key of the pydantic models the tables are validated by, with its type and its description."""
    from compile_checks.gate.config import GateConfig
    from compile_checks.scan.config import ScanConfig

    page = reference.config()
    for model in (GateConfig, ScanConfig):
        for key, field in model.model_fields.items():
            assert field.description, key  # the reference's meaning column: none left empty
            assert f"| `{key}` |" in page and field.description.replace("|", "\\|") in page, key
    assert "| `targets` | list of strings | not set |" in page
    assert "| `graphs` | table of name = bool | not set |" in page and "| `expect_clean` | bool | `true` |" in page


def test_exit_codes_follow_the_cli_table_and_the_enum(reference: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import compile_checks.cli
    from compile_checks.vocab import ExitCode

    page = reference.exit_codes()
    assert all(f"| `{int(code)}` | `{code.name}` |" in page for code in ExitCode)
    # negative control: a code the CLI's table lost is caught, not silently left out of the page
    doc = compile_checks.cli.__doc__ or ""
    monkeypatch.setattr(
        compile_checks.cli, "__doc__", doc.replace("    5    every verdict met", "    every verdict met")
    )
    with pytest.raises(ValueError, match=r"disagree on \[5"):
        reference.exit_codes()


def test_the_scenario_page_follows_the_registry(reference: ModuleType) -> None:
    from compile_checks.scenarios.registry import DEFAULT_GATE, SCENARIOS

    page = reference.scenarios()
    assert all(f"| `{name}` |" in page for name in SCENARIOS)
    assert page.count("**gate**") >= len(DEFAULT_GATE)


def test_the_performance_page_is_the_benchmarks_results_file(reference: ModuleType) -> None:
    """Every figure on the page comes from reports/results/bench.json, with its command and machine."""
    import json

    doc = json.loads((ROOT / "reports" / "results" / "bench.json").read_text())
    page = reference.performance()
    assert f"Command: `{doc['command']}`" in page and doc["machine"]["torch"] in page
    assert all(f"**{row['fused_over_split']:.2f}x**" in page for row in doc["rows"])


def test_the_production_cost_is_the_benchmarks_results_file(reference: ModuleType) -> None:
    """The production-size guide's cost table: every case, the floor and the gate, from bench_production.json."""
    import json

    doc = json.loads((ROOT / "reports" / "results" / "bench_production.json").read_text())
    page = reference.production_cost()
    assert f"Command: `{doc['command']}`" in page and doc["machine"]["torch"] in page
    for row in doc["rows"]:
        gates = [side for side in row if side.startswith("gate_")]
        assert gates and all(f"**{row[g]['wall_over_floor']:.2f}x**" in page for g in gates)
        assert all(row[g]["verdict_expected"] for g in gates)  # a figure is only shown for a right verdict
    assert "**wrong**" not in page


def test_the_bench_writes_command_machine_and_rows(tmp_path: Path) -> None:
    import json

    import pandas as pd

    from reports.bench import write_results

    rows = pd.DataFrame([{"device": "cpu", "pool_bytes": 1 << 24, "fused_over_split": 12.5}])
    doc = json.loads(write_results(tmp_path, rows, "python -m reports.bench --out x").read_text())
    assert doc["command"] == "python -m reports.bench --out x" and doc["rows"][0]["fused_over_split"] == 12.5
    assert {"cpu", "cores", "system", "python", "torch", "threads"} <= set(doc["machine"])


def empty_meanings(tables: list[tuple[str, list[list[str]]]]) -> list[str]:
    """``section: key`` for every row of the JSON reference whose meaning is empty."""
    return [f"{heading}: {row[0]}" for heading, rows in tables for row in rows if not row[2].strip()]


def test_every_json_key_has_a_meaning(reference: ModuleType) -> None:
    """Each key of the --json reference says what it means, from the code's own field docs."""
    tables = reference.json_tables()
    assert sum(len(rows) for _, rows in tables) >= 40
    assert empty_meanings(tables) == []


def test_an_undocumented_field_has_an_empty_meaning(reference: ModuleType) -> None:
    """Negative control: a field with no docstring entry and no comment is found; each way of documenting
    one (an ``Attributes:`` entry, a comment beside, comments above, a property's docstring) is read."""
    import dataclasses

    @dataclasses.dataclass
    class Planted:
        """Planted.

        Attributes:
            listed: from the docstring.
        """

        listed: int = 0
        beside: int = 0  # from the comment beside
        # from the comment
        # above
        above: int = 0
        bare: int = 0

        @property
        def derived(self) -> int:
            """From the property."""
            return 0

    meanings = reference.field_meanings(Planted)
    assert meanings == {
        "listed": "from the docstring.",
        "beside": "from the comment beside",
        "above": "from the comment above",
        "bare": "",
        "derived": "From the property.",
    }
    rows = [[f"`{k}`", "int", v] for k, v in meanings.items()]
    assert empty_meanings([("Planted", rows)]) == ["Planted: `bare`"]
