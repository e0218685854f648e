"""Real-code robustness (issue 18): a Self-Forcing-style attention stack with ``.item()`` graph breaks gates
clean through the CLI (with ``--dump-dir``) and the pytest plugin, and its cloning twin still fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from compile_checks.cli import main

pytestmark = pytest.mark.compile

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
TARGET = f"{HERE / '_self_forcing.py'}:cases"


def test_the_stack_gates_clean_with_dumps_and_its_fused_twin_keeps_cloning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dumps = tmp_path / "dumps"
    code = main(["gate", TARGET, "--dump-dir", str(dumps), "--json", "--no-progress", "--jobs", "1"])
    doc = json.loads(capsys.readouterr().out)
    by_label = {c["label"]: c for c in doc["cases"]}
    clean, fused = by_label["self_forcing"], by_label["self_forcing_fused"]
    assert code == 0, doc
    # no false blind spot: the graph breaks' no-op regions (x.type_as(v); return) count as analysed
    assert clean["passed"] and clean["clean"] and clean["check_errors"] == [] and clean["report"]["unanalysed"] == []
    assert clean["report"]["num_regions"] > 4  # the .item() / .tolist() breaks really split the step
    # negative control: the window read before the commit keeps a copy of every layer's cache
    assert fused["passed"] and not fused["clean"]
    assert {c["pool"] for c in fused["clones"]} == {"layer0.k", "layer0.v", "layer1.k", "layer1.v"}
    assert clean["report"]["dump_failures"] == [] and (dumps / "self_forcing" / "index.md").is_file()


USER_TESTS = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from _self_forcing import self_forcing_case


def test_stack_is_clean(pool_clone_check):
    pool_clone_check.check(self_forcing_case("plugin_stack"))


def test_fused_twin_expected_clean_fails(pool_clone_check):
    pool_clone_check.check(self_forcing_case("plugin_fused", layout="fused", expect_clean=True))
"""


def test_the_plugin_passes_the_stack_and_dumps_only_the_failing_check(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "--compile-checks-analysis-only")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "dumps kept at" in out and "POST_GRAD.0.py:" in out  # the check's own dump of the failing check
    kept = Path(re.search(r"dumps kept at (/\S+)", out).group(1))  # type: ignore[union-attr]
    assert (kept / "index.md").is_file() and list(kept.glob("__compiled_fn_*.POST_GRAD.0.py"))
    # nothing dumped for the passing check unless asked (--keep-compile-dumps)
    assert not list(kept.parent.parent.parent.glob("test_stack_is_clean*/compile_checks/check0"))
