"""The gate on a user's case file: a lost write, an undeclared write and a recompile count reach the exit
code, the JSON and the table; the clean twin passes. In-process (``main()``), analysis-only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from compile_checks.cli import main

pytestmark = pytest.mark.compile

CASES = """
import torch
import _writes_ops as ops
from compile_checks import Case

SLOTS = torch.tensor([1, 3])


def _hidden(name, fn, **kw):
    cache = torch.zeros(8, 4)
    k, q = torch.ones(2, 4), torch.randn(2, 4)

    def driver(step):
        ops.CONTEXT["cache"] = cache
        return step(k, SLOTS, q)

    return Case(name, fn, pools={"cache": cache}, driver=driver, **kw)


def _declared(name, **kw):
    cache = torch.zeros(8, 4)
    k, q = torch.ones(2, 4), torch.randn(2, 4)
    return Case(name, ops.declared_write, pools={"cache": cache}, driver=lambda step: step(cache, k, SLOTS, q), **kw)


def bad():
    return [_hidden("lost", ops.dummy_unused), _hidden("undeclared", ops.dummy_into_attention)]


def good():
    return [_declared("declared", max_recompiles=0)]
"""


@pytest.fixture
def cases_file(tmp_path: Path) -> Path:
    path = tmp_path / "write_cases.py"
    path.write_text(CASES)
    return path


def test_write_findings_fail_the_gate(cases_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["gate", f"{cases_file}:bad", "--json", "--no-progress"])
    doc = json.loads(capsys.readouterr().out)
    by = {c["label"]: c for c in doc["cases"]}
    assert code != 0 and doc["exit_code"] == code
    assert [f["kind"] for f in by["lost"]["report"]["run_findings"]] == ["lost_write"]
    assert [f["kind"] for f in by["undeclared"]["report"]["run_findings"]] == ["undeclared_write"]
    assert not by["lost"]["passed"] and not by["undeclared"]["passed"]
    # a lost write is a finding of its own, with its cause and fix (never among what could not be decided)
    [lost] = [f for f in by["lost"]["findings"] if f["kind"] == "lost_write"]
    assert lost["message"].startswith("region 0 ") and "call 1 of 1: pool 'cache'" in lost["message"]
    assert "dead code" in lost["cause"] and "mutates_args" in lost["fix"] and by["lost"]["check_errors"] == []
    assert main(["gate", f"{cases_file}:bad", "--no-progress"]) == code
    table = capsys.readouterr().out
    assert re.search(r"│ lost +│.*│ lost_write +│.*│ FAIL", table), table
    assert re.search(r"│ undeclared +│.*│ undeclared_write +│.*│ FAIL", table), table


def test_clean_twin_passes_and_the_table_shows_graphs(cases_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", f"{cases_file}:good", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"┃ graphs ┃", out) and re.search(r"│ declared +│.*│ 1 +│ pass", out), out
    code = main(["gate", f"{cases_file}:good", "--json", "--no-progress"])
    doc = json.loads(capsys.readouterr().out)
    [case] = doc["cases"]
    assert code == 0 and case["passed"] and case["report"]["run_findings"] == []
    [(name, entry)] = case["report"]["recompiles"].items()
    assert name.startswith("declared_write (_writes_ops.py:") and entry["graphs"] == 1
