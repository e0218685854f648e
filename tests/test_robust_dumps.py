"""Dumps never break a check (issue 18.1), and a no-op region is no blind spot (issue 18.2).

depyf 0.20 fails on real code (its exit walks each resume function a graph break leaves, recursively:
around 200 sequential ``.item()`` breaks exceed Python's recursion limit). That walk, and its
bytecode hook, are made to raise here (a real chain takes minutes to compile): the verdict must stand,
the failure must be reported with depyf's error, and the check's own files must be in the dump.
"""

from __future__ import annotations

import json
from pathlib import Path

import depyf.decompiler
import depyf.explain.utils
import pytest
import torch
from _soundness_steps import commit_args, op_commit_late_read, pools_split
from torch._inductor import compile_fx as compile_fx_module

from compile_checks.api import CloneCheck, analyze_pool_clones, format_report
from compile_checks.check import backend
from compile_checks.cli import main

pytestmark = pytest.mark.compile

HERE = Path(__file__).parent


def _recursion(*args: object, **kwargs: object) -> None:
    raise RecursionError("maximum recursion depth exceeded")


@pytest.fixture
def depyf_exit_recurses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(depyf.explain.utils.DynamoOptimizationResult, "__init__", _recursion)


def _fused_report(dump_dir: Path):
    k, v = pools_split()
    return analyze_pool_clones(
        op_commit_late_read, k, v, *commit_args(), pools={"k": k, "v": v}, dump_dir=dump_dir, analysis_only=True
    )


def test_a_failing_depyf_exit_is_a_dump_failure_and_the_verdict_stands(tmp_path: Path, depyf_exit_recurses) -> None:
    report = _fused_report(tmp_path / "d")
    assert [c.arg for c in report.clones] == ["v_pool"]  # the real verdict
    assert report.dump_failures == [
        "depyf failed writing its full_code_* files on exit: RecursionError: maximum recursion depth exceeded"
    ]
    assert list((tmp_path / "d").glob("__compiled_fn_*.POST_GRAD.0.py"))  # the check's own files
    assert report.clones[0].graph_file is not None and "POST_GRAD" in report.clones[0].graph_file
    assert "dump failed (an artifact only: the verdict stands): depyf failed" in format_report(report)
    assert "## dump failures" in (tmp_path / "d" / "index.md").read_text()


def test_without_the_failure_depyf_dumps_and_nothing_is_reported(tmp_path: Path) -> None:
    report = _fused_report(tmp_path / "d")
    assert report.dump_failures == [] and list((tmp_path / "d").glob("full_code_for_*.py"))


def test_a_failing_bytecode_hook_never_fails_the_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(depyf.decompiler.Decompiler, "decompile_and_compile_like", staticmethod(_recursion))
    report = _fused_report(tmp_path / "d")
    assert [c.arg for c in report.clones] == ["v_pool"]
    assert any(
        f.startswith("depyf's bytecode hook failed on `op_commit_late_read`: RecursionError")
        for f in report.dump_failures
    )


@pytest.mark.parametrize("how", ["--dump-dir", "pyproject", "dump"])
def test_every_cli_dump_path_keeps_the_verdict(
    how: str, tmp_path: Path, depyf_exit_recurses, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    target = f"{HERE / '_self_forcing.py'}:static_cases"  # `dump` compiles fully: static shapes keep the twin cloning
    dumps = tmp_path / "dumps"
    args = ["--json", "--no-progress", "--jobs", "1"]
    if how == "--dump-dir":
        code = main(["gate", target, "--dump-dir", str(dumps), *args])
    elif how == "dump":
        code = main(["dump", target, "--out", str(dumps), *args])  # dump compiles fully
    else:
        (tmp_path / "pyproject.toml").write_text(f'[tool.compile_checks]\ntargets = ["{target}"]\ndump_dir = "dumps"\n')
        monkeypatch.chdir(tmp_path)
        code = main(["gate", *args])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    by_label = {c["label"]: c for c in doc["cases"]}
    assert by_label["self_forcing"]["clean"] and not by_label["self_forcing_fused"]["clean"]
    for case in doc["cases"]:
        assert case["passed"] and any("RecursionError" in f for f in case["report"]["dump_failures"])
    assert (dumps / "self_forcing" / "index.md").is_file()


def test_a_no_op_region_is_analysed_but_a_bypassed_one_stays_a_blind_spot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a compile path that never runs the post-grad passes, a graph with no call node (what a graph
    break leaves: ``x.type_as(v); return``) has nothing to find; a graph with compute is a blind spot."""
    x, v = torch.randn(4, 8), torch.randn(4, 8)
    for fn, blind in ((lambda x, v: x.type_as(v), False), (lambda x, v: x + v, True)):
        with CloneCheck(analysis_only=True) as check, monkeypatch.context() as bypass:  # hooks verified first
            bypass.setattr(compile_fx_module, "compile_fx_inner", lambda gm, *a, **kw: backend._run_fx_graph(gm))
            check.compile(fn)(x, v)
        report = check.report
        assert report is not None and report.clean
        if blind:
            assert len(report.unanalysed) == 1 and "no post-grad graph was observed" in report.unanalysed[0]
            assert "to avoid:" in report.unanalysed[0] and not report.check_passed
        else:
            assert report.unanalysed == [] and report.check_passed
