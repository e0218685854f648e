"""``gate --floor``: each case's compiled regions timed the check's way and the floor's, side by side.

The floor is plain ``torch.compile`` stopped after Inductor's post-grad passes (the case's own
compile path and settings); a region the check adds cost to shows as check / floor > 1. Negative
controls: without ``--floor`` nothing is measured or printed; a full compile has no floor (it
would compare C++ codegen with none) and says so instead of a number.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli_cases import ENGINE

from compile_checks.cli import main

pytestmark = pytest.mark.compile


@pytest.fixture
def engine(tmp_path: Path) -> str:
    (tmp_path / "engine.py").write_text(ENGINE)
    return f"{tmp_path / 'engine.py'}:gate"


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_floor_times_every_region_of_each_case_beside_the_check(engine: str, capsys) -> None:
    doc = _json(capsys, ["gate", engine, "--floor", "--jobs", "1", "--no-progress", "--json"])
    for case in doc["cases"]:  # a clean case and a negative control: verdicts as without --floor
        floor, check = case["floor_region_seconds"], case["check_region_seconds"]
        assert case["passed"] and len(floor) == len(check) >= 1, case["label"]
        assert all(s > 0 for s in floor + check)
    assert main(["gate", engine, "--floor", "--jobs", "1", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "the check vs its floor" in text and "split_step" in text and "total" in text


def test_without_floor_nothing_is_measured(engine: str, capsys) -> None:
    doc = _json(capsys, ["gate", engine, "--jobs", "1", "--no-progress", "--json"])
    assert all(c["floor_region_seconds"] == [] == c["check_region_seconds"] for c in doc["cases"])
    assert main(["gate", engine, "--jobs", "1", "--no-progress"]) == 0
    assert "its floor" not in capsys.readouterr().out


def test_a_full_compile_has_no_floor_and_says_so(engine: str, capsys) -> None:
    doc = _json(capsys, ["gate", engine, "--floor", "--full", "--jobs", "1", "--no-progress", "--json"])
    for case in doc["cases"]:
        assert case["floor_region_seconds"] == [] and any("--floor: not measured" in n for n in case["notes"])
