"""Every output tells the gate's story (issue 49): the MLA reproducer (a latent and a rope cache per layer,
written by an op declaring ``mutates_args=()``, so AOT drops it) is a ``lost_write`` on all 4 caches in the
table, ``--json``, JUnit, the pytest plugin and ``dump``'s index alike: each a finding of its own, with
its cause and fix, once. Before the findings model the index said CLEAN, the gate folded the 4 writes into
"the check could not decide: ..." on one line, and the plugin printed them twice."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import _mla_engine
import pytest
from rich.console import Console

from compile_checks.cli import main
from compile_checks.gate.merge import outcome_from_dict
from compile_checks.gate.outputs import SCHEMA_VERSION, print_results
from compile_checks.gate.plugin import PoolCloneCheck

pytestmark = pytest.mark.compile

CACHES = ["layer0.latent", "layer0.rope", "layer1.latent", "layer1.rope"]
ENGINE = Path(_mla_engine.__file__)


@pytest.fixture(scope="module")
def gate_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One gate run of the reproducer: its exit code, ``--json`` document, JUnit file and dump folder."""
    root = tmp_path_factory.mktemp("mla")
    junit, dumps, out = root / "junit.xml", root / "dumps", io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        code = main(
            ["gate", f"{ENGINE}:mla", "--json", "--junitxml", str(junit), "--dump-dir", str(dumps), "--no-progress"]
        )
    return {"code": code, "doc": json.loads(out.getvalue()), "junit": junit, "dumps": dumps}


def _case(run: dict[str, Any]) -> dict[str, Any]:
    (case,) = run["doc"]["cases"]
    return case  # type: ignore[no-any-return]


def test_json_lists_each_lost_write_as_a_finding_with_cause_and_fix(gate_run: dict[str, Any]) -> None:
    case = _case(gate_run)
    assert gate_run["code"] == 1 and gate_run["doc"]["schema_version"] == SCHEMA_VERSION == 2
    lost = [f for f in case["findings"] if f["kind"] == "lost_write"]
    assert sorted(f["pool"] for f in lost) == CACHES and all(f["fails"] for f in lost)
    assert all("dead code" in f["cause"] and "mla49_tests::write_latent_rope" in f["fix"] for f in lost)
    assert case["verdict"] == {
        "clean": True,
        "verdict_met": False,
        "passed": False,
        "expect_clean": True,
        "failing": ["lost_write"],
    }
    assert not case["passed"] and case["check_errors"] == []  # a lost write is no undecided problem


def test_the_table_prints_each_finding_once_with_its_cause(gate_run: dict[str, Any]) -> None:
    console = Console(file=io.StringIO(), width=200)
    import compile_checks.gate.outputs as outputs

    outcome = outcome_from_dict(_case(gate_run))
    original = outputs._console
    outputs._console = lambda: console
    try:
        print_results([outcome], title="t", code=1, seconds=1.0, notes=[], timings=False)
    finally:
        outputs._console = original
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert re.search(r"│ mla +│.*│ lost_write +│.*│ FAIL", text), text
    for pool in CACHES:
        assert len(re.findall(rf"lost_write: .*pool '{re.escape(pool)}'", text)) == 1, text
    assert text.count("cause: ") == 1 and text.count("fix: ") == 1 and "could not decide" not in text
    assert max(len(line) for line in text.splitlines()) < 400  # no 1,100-character line


def test_junit_says_lost_write_once_each(gate_run: dict[str, Any]) -> None:
    failure = ET.parse(gate_run["junit"]).getroot().find("testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "check_error"
    message = failure.get("message") or ""
    assert all(message.count(f"pool '{pool}'") == 1 for pool in CACHES), message
    assert message.count("cause: ") == 1 and "could not decide" not in message


def test_the_dump_index_fails_the_case(gate_run: dict[str, Any]) -> None:
    index = (gate_run["dumps"] / "mla" / "index.md").read_text()
    assert "CLEAN" not in index and "Verdict: **FAILS: lost_write x4" in index, index[:400]
    assert "## findings that fail the case" in index and "mutates_args" in index


def test_the_plugin_prints_each_finding_once(tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as failed:
        PoolCloneCheck(tmp_path, keep=False, analysis_only=True).check(_mla_engine.mla_case())
    text = str(failed.value)
    for pool in CACHES:
        assert len(re.findall(rf"lost_write: .*pool '{re.escape(pool)}'", text)) == 1, text
    assert text.count("cause: ") == 1 and "could not decide" not in text
    index = next(tmp_path.rglob("index.md")).read_text()  # the failing check's own dump says so too
    assert "FAILS: lost_write x4" in index
