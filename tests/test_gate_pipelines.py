"""Per-pipeline expectations: one pyproject gates a layout clean under v2 and cloning under v1.

The layout is the whole ``(2, S, H, D)`` cache passed into the region and split there (``kv[0]``,
``kv[1]``): stock's v2 functionalization re-inplaces it, vLLM's v1 keeps pool clones. The real check
decides both verdicts (no expectation is taken on faith); the negative controls are the same layout
with one bool expectation, which must fail on the pipeline that changed and say it was the pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from compile_checks import Case
from compile_checks.cli import main
from compile_checks.gate.plan import plan_targets
from compile_checks.vocab import Mode

CASES = '''
import torch
import ar_paging
from compile_checks import Case

N, H, D, T = 32, 2, 4, 4


def commit_kv(kv, new_k, new_v, slots):
    """The whole (2, N, H, D) cache is one input; K and V are split inside the region."""
    torch.ops.ar_paging.paged_write(kv[0], kv[1], new_k, new_v, slots)
    return new_k.sum()


def make(name, expect_clean, pipeline="stock"):
    g = torch.Generator().manual_seed(0)
    kv = torch.zeros(2, N, H, D)
    new_k, new_v = torch.randn(T, H, D, generator=g), torch.randn(T, H, D, generator=g)
    slots = torch.randperm(N, generator=g)[:T]
    return Case(name, commit_kv, (kv, new_k, new_v, slots), pools={"kv": kv}, expect_clean=expect_clean,
                pipeline=pipeline)


def per_pipeline():
    return [make("kv_inside", {"stock": True, "vllm": False})]


def one_bool_clean():
    """Written for stock (clean there); the gate's pipelines also run it under vllm, where it clones."""
    return [make("kv_bool", True)]


def control_for_vllm():
    """A negative control written for vllm; the gate's pipelines also run it under stock, where it is clean."""
    return [make("kv_control", False, pipeline="vllm")]


def same_name_two_pipelines():
    return [make("kv_twice", {"stock": True}), make("kv_twice", {"vllm": False})]


def same_name_bools():
    return [make("kv_twice", True), make("kv_twice", False, pipeline="vllm")]
'''


def _project(folder: Path, targets: list[str], pipelines: Sequence[str] = ("stock", "vllm")) -> Path:
    (folder / "cases.py").write_text(CASES)
    table = f"[tool.compile_checks]\ntargets = {json.dumps(targets)}\n"
    if pipelines:
        table += f"pipelines = {json.dumps(list(pipelines))}\n"
    (folder / "pyproject.toml").write_text(table)
    return folder


def _gate(
    folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, dict[str, Any]]:
    monkeypatch.chdir(folder)
    code = main(["gate", "--json", "--no-progress", "--jobs", "1"])
    return code, json.loads(capsys.readouterr().out)


# ---- one gate run through the CLI, from a temporary project ------------------------------------------


@pytest.mark.compile
def test_v2_clean_v1_clone_case_gates_green_from_one_pyproject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, doc = _gate(_project(tmp_path, ["cases.py:per_pipeline"]), capsys, monkeypatch)
    rows = [(c["label"], c["pipeline"], c["expect_clean"], c["clean"], c["passed"]) for c in doc["cases"]]
    assert rows == [("kv_inside", "stock", True, True, True), ("kv_inside[vllm]", "vllm", False, False, True)]
    assert code == 0
    assert {c["pool"] for c in doc["cases"][1]["clones"]} == {"kv"}  # the check's own evidence under v1


@pytest.mark.compile
def test_one_bool_expectation_fails_on_the_pipeline_that_changed_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative controls of the mapping: the same layout with a single bool fails where the pipeline differs."""
    folder = _project(tmp_path, ["cases.py:one_bool_clean", "cases.py:control_for_vllm"])
    code, doc = _gate(folder, capsys, monkeypatch)
    by_label = {c["label"]: c for c in doc["cases"]}
    assert code == 1
    assert [label for label, c in by_label.items() if not c["passed"]] == ["kv_bool[vllm]", "kv_control"]
    assert by_label["kv_bool"]["passed"] and by_label["kv_control[vllm]"]["passed"]  # their own pipelines
    # the reason names the pipeline as what changed, with the mapping that would state it
    from compile_checks.gate.merge import outcome_from_dict

    cloned = " ".join(outcome_from_dict(by_label["kv_bool[vllm]"]).failure_reasons())
    assert "survive reinplacing under the vllm pipeline" in cloned
    assert "the gate's pipelines chose vllm" in cloned and "expect_clean={'stock': True, 'vllm': False}" in cloned
    lost = " ".join(outcome_from_dict(by_label["kv_control"]).failure_reasons())
    assert lost.startswith("negative control stopped cloning under the stock pipeline; the gate's pipelines chose")
    assert "expect_clean={'vllm': False, 'stock': True}" in lost
    assert by_label["kv_control"]["retargeted_from"] == "vllm"


# ---- planning (nothing compiles) -----------------------------------------------------------------


def test_mapping_fixes_the_pipelines_and_the_gates_pipelines_select(tmp_path: Path) -> None:
    _project(tmp_path, ["cases.py:per_pipeline"])

    def rows(pipelines: list[str]) -> list[tuple[str, str, bool]]:
        plan = plan_targets(["cases.py:per_pipeline"], tmp_path, pipelines, mode=Mode.ANALYSIS)
        return [(p.label, p.pipeline, p.expect_clean) for p in plan.cases]

    both = [("kv_inside", "stock", True), ("kv_inside[vllm]", "vllm", False)]
    assert rows([]) == both  # no gate pipelines: the mapping's
    assert rows(["stock", "vllm"]) == both
    assert rows(["vllm"]) == both[1:]  # selected, not re-targeted
    plan = plan_targets(["cases.py:per_pipeline"], tmp_path, ["stock", "vllm-piecewise"], mode=Mode.ANALYSIS)
    assert [p.label for p in plan.cases] == ["kv_inside"]
    skipped = (
        "cases.py:per_pipeline: kv_inside is not run under vllm-piecewise: its expect_clean names only stock, vllm"
    )
    assert plan.notes == [skipped]


def test_two_cases_of_one_name_on_different_pipelines(tmp_path: Path) -> None:
    _project(tmp_path, [])
    plan = plan_targets(["cases.py:same_name_two_pipelines"], tmp_path, ["stock", "vllm"], mode=Mode.ANALYSIS)
    assert [(p.label, p.pipeline, p.expect_clean) for p in plan.cases] == [
        ("kv_twice", "stock", True),
        ("kv_twice[vllm]", "vllm", False),
    ]
    # without the gate's pipelines, single bools on different pipelines are two rows too
    plan = plan_targets(["cases.py:same_name_bools"], tmp_path, [], mode=Mode.ANALYSIS)
    assert [p.label for p in plan.cases] == ["kv_twice", "kv_twice[vllm]"]
    # with them, both bools run under both pipelines: refused, with the way out
    with pytest.raises(ValueError, match="name a case's pipelines with an expect_clean mapping"):
        plan_targets(["cases.py:same_name_bools"], tmp_path, ["stock", "vllm"], mode=Mode.ANALYSIS)


def test_a_bool_case_label_carries_its_own_pipeline(tmp_path: Path) -> None:
    _project(tmp_path, [])
    plan = plan_targets(["cases.py:control_for_vllm"], tmp_path, [], mode=Mode.ANALYSIS)
    assert [(p.label, p.group, p.retargeted_from) for p in plan.cases] == [
        ("kv_control[vllm]", "cases.py:control_for_vllm/vllm", None)
    ]
    plan = plan_targets(["cases.py:control_for_vllm"], tmp_path, ["stock"], mode=Mode.ANALYSIS)
    assert [(p.label, p.retargeted_from) for p in plan.cases] == [("kv_control", "vllm")]


def test_expect_clean_mapping_is_validated() -> None:
    def fn(x: object) -> object:
        return x

    case = Case("c", fn, expect_clean={"vllm": False})
    assert case.pipeline == "vllm" and case.expects_clean is False  # the default pipeline: the first key
    assert case.expected_pipelines == ("vllm",)
    with pytest.raises(ValueError, match="no expectation for pipeline stock"):
        case.expects_clean_on("stock")
    with pytest.raises(ValueError, match="unknown pipeline"):
        Case("c", fn, expect_clean={"vlm": False})
    with pytest.raises(ValueError, match="values must be bools"):
        Case("c", fn, expect_clean={"stock": 1})
    with pytest.raises(ValueError, match="pipeline vllm-piecewise has no expectation"):
        Case("c", fn, expect_clean={"stock": True}, pipeline="vllm-piecewise")
    with pytest.raises(ValueError, match="non-empty mapping"):
        Case("c", fn, expect_clean={})
    assert Case("c", fn, expect_clean=True).expected_pipelines is None


def test_list_pipeline(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_project(tmp_path, ["cases.py:per_pipeline", "cases.py:one_bool_clean"]))
    assert main(["list", "--pipeline", "vllm", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["pipeline"], r["expect_clean"]) for r in rows] == [
        ("kv_inside[vllm]", "vllm", False),
        ("kv_bool[vllm]", "vllm", True),
    ]


def test_dump_compiles_each_case_under_one_pipeline_unless_told(tmp_path: Path) -> None:
    """The table's three pipelines are the gate's: dump compiles each case once (its own pipeline)."""
    from compile_checks.cli_parser import merged as _merge
    from compile_checks.cli_parser import parser as _parser
    from compile_checks.gate.commands import plan
    from compile_checks.gate.config import load_config

    folder = _project(
        tmp_path, ["cases.py:per_pipeline", "cases.py:control_for_vllm"], ["stock", "vllm", "vllm-piecewise"]
    )
    config = load_config(folder / "pyproject.toml")

    def labels(argv: list[str]) -> list[str]:
        args = _merge(_parser().parse_args(["dump", "--out", str(tmp_path / "d"), *argv]))
        return [p.label for p in plan(args, "dump", Mode.FULL, config).cases]

    assert labels([]) == ["kv_inside", "kv_control[vllm]"]
    assert labels(["--pipeline", "vllm"]) == ["kv_inside[vllm]", "kv_control[vllm]"]
    gate_args = _merge(_parser().parse_args(["gate"]))
    assert len(plan(gate_args, "gate", Mode.ANALYSIS, config).cases) == 5  # the gate: every table pipeline
