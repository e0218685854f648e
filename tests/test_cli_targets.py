"""``compile-checks gate TARGET...`` on a user's own case file: verdicts, exit codes, JUnit, JSON, config.

In-process (``main()``) and analysis-only, so each case costs one post-grad compile.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from compile_checks.cli import main
from tests._cli_cases import write_engine

pytestmark = pytest.mark.compile


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    return write_engine(tmp_path)


def _junit_cases(path: Path) -> dict[str, ET.Element]:
    root = ET.parse(path).getroot()
    return {tc.get("name"): tc for tc in root.iter("testcase")}


def test_clean_case_and_cloning_negative_control_exit_0(
    engine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "out" / "junit.xml"
    code = main(["gate", f"{engine}:gate", "--junitxml", str(junit), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["schema_version"] == 2 and doc["exit_code"] == 0
    by = {c["label"]: c for c in doc["cases"]}
    assert by["split_step"]["clean"] is True and by["split_step"]["passed"] is True
    fused = by["fused_control"]
    assert fused["clean"] is False and fused["passed"] is True and fused["analysis_only"] is True
    assert [(c["arg"], c["pool"]) for c in fused["clones"]] == [("v_pool", "layer0.v")]
    cases = _junit_cases(junit)
    assert set(cases) == {"split_step", "fused_control"}
    assert cases["split_step"].get("classname") == f"{engine}:gate/stock"
    assert all(tc.find("failure") is None and tc.find("error") is None for tc in cases.values())


def test_clean_expected_case_that_clones_exits_1_and_junit_names_op_arg_pool_bytes(
    engine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "junit.xml"
    assert main(["gate", f"{engine}:regressed", "--junitxml", str(junit)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "v_pool" in out
    failure = _junit_cases(junit)["fused_expected_clean"].find("failure")
    assert failure is not None
    message = failure.get("message", "")
    nbytes = 2 * 64 * 2 * 8 * 4  # the whole (2, N, H, D) fp32 storage
    for part in ("ar_paging::paged_write", "v_pool", "pool layer0.v", f"{nbytes} bytes"):
        assert part in message, (part, message)
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "1"  # type: ignore[union-attr]


def test_negative_control_that_stops_cloning_exits_1(engine: Path, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    assert main(["gate", f"{engine}:lost_control", "--junitxml", str(junit), "--no-progress"]) == 1
    failure = _junit_cases(junit)["split_marked_control"].find("failure")
    assert failure is not None and "negative control stopped cloning" in failure.get("message", "")


def test_module_target_and_options_before_the_subcommand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pkg = tmp_path / "myengine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    write_engine(pkg, "cases.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["--json", "--pipeline", "stock", "gate", "myengine.cases:SPLIT_INSTANCE"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [c["label"] for c in doc["cases"]] == ["split_instance"] and doc["cases"][0]["pipeline"] == "stock"
        assert doc["cases"][0]["group"] == "myengine.cases:SPLIT_INSTANCE/stock"
    finally:
        for name in [m for m in sys.modules if m.startswith("myengine")]:
            del sys.modules[name]


def test_pyproject_table_supplies_targets_and_junit(
    engine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.compile_checks]\ntargets = ["engine.py:gate"]\njunitxml = "reports/gate.xml"\n'
    )
    monkeypatch.chdir(tmp_path)
    assert main(["gate", "--timings", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "split_step" in out and "fused_control" in out and "timings (s)" in out
    assert set(_junit_cases(tmp_path / "reports" / "gate.xml")) == {"split_step", "fused_control"}


def test_eager_mismatch_exits_5(engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", f"{engine}:wrong_numbers", "--no-progress"]) == 5
    assert "NO (5.00e-01)" in capsys.readouterr().out


@pytest.mark.slow
def test_dump_compiles_fully_and_writes_an_index_per_case(
    engine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dumps"
    assert main(["dump", f"{engine}:regressed", "--out", str(out), "--json"]) == 1
    case = json.loads(capsys.readouterr().out)["cases"][0]
    assert case["analysis_only"] is False and case["clones"][0]["where"].split(":")[0].endswith(".py")
    index = (out / "fused_expected_clean" / "index.md").read_text()
    assert "CLONED" in index and "AFTER_POST_GRAD" in index


def test_pyproject_defaults_hold_for_targets_given_on_the_command_line(
    engine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TARGET on the command line replaces the table's `targets`, not its `pipelines` default."""
    (tmp_path / "pyproject.toml").write_text('[tool.compile_checks]\ntargets = ["nope.py:x"]\npipelines = ["vllm"]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["list", f"{engine}:gate", "--json"]) == 0
    assert {r["pipeline"] for r in json.loads(capsys.readouterr().out)} == {"vllm"}
    # negative control: without the table the cases keep their own (stock) pipeline
    (tmp_path / "pyproject.toml").unlink()
    assert main(["list", f"{engine}:gate", "--json"]) == 0
    assert {r["pipeline"] for r in json.loads(capsys.readouterr().out)} == {"stock"}
