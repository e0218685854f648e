"""Explanation formatting on every surface: summary, lines, to_dict, render_copy / format_report, index excerpts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from compile_checks.api import format_report
from compile_checks.check.findings import CloneReport, SurvivingClone
from compile_checks.explain.dumps import excerpt, render_explanation, side_by_side
from compile_checks.explain.explanations import Conflict, Explanation
from compile_checks.explain.user_source import Frame, is_library_frame, parse_stack_trace, short_path
from compile_checks.verdict import copy_fields, render_copy

RAW = Explanation(
    cause="read_after_write",
    reason="the old value of `k_pool` (layer0.k) is read after the write by `index` (aten::index)",
    user_line="engine/model.py:42",
    conflicting=[Conflict("index", "aten::index", "ar_paging/read_path.py:59")],
    culprit_pass="reorder_for_locality",
    culprit_verified=True,
    fix="commit before the window gather",
    write_node="auto_functionalized_v2",
)


def _clone(explanation: Explanation | None) -> SurvivingClone:
    return SurvivingClone(
        op="ar_paging::paged_write",
        arg="k_pool",
        nbytes=1024,
        shape=(256,),
        dtype=torch.float32,
        pool="layer0.k",
        layer=0,
        node="clone_default",
        explanation=explanation,
    )


def test_summary_is_one_line_with_cause_line_culprit_and_fix() -> None:
    s = RAW.summary()
    assert "\n" not in s
    assert s.startswith("read_after_write: the old value of `k_pool`")
    assert "written at engine/model.py:42" in s and "caused by reorder_for_locality (verified)" in s
    assert s.endswith("fix: commit before the window gather")


def test_lines_name_every_piece_of_evidence() -> None:
    assert RAW.lines() == [
        "why: read_after_write: the old value of `k_pool` (layer0.k) is read after the write by `index` (aten::index)",
        "mutating call: engine/model.py:42",
        "conflicting read: `index` (aten::index) at ar_paging/read_path.py:59",
        "culprit pass: reorder_for_locality (verified: re-running the post-grad passes with reorder_for_locality "
        "off removes this clone)",
        "fix: commit before the window gather",
    ]
    unverified = Explanation(cause="read_after_write", reason="r", culprit_pass="p", fix="f")
    assert "culprit pass: p (not verified: the clone stays with the pass disabled)" in unverified.lines()
    assert "mutating call: (no user stack trace on the node)" in unverified.lines()


def test_unknown_cause_is_rejected() -> None:
    with pytest.raises(ValueError, match="cause must be one of"):
        Explanation(cause="unknown", reason="", fix="")


def test_to_dict_is_json_and_rides_on_the_clone() -> None:
    d = _clone(RAW).to_dict()
    assert json.loads(json.dumps(d))["explanation"] == {
        "cause": "read_after_write",
        "reason": RAW.reason,
        "user_line": "engine/model.py:42",
        "wrapper_line": None,
        "conflicting": [
            {"node": "index", "op": "aten::index", "user_line": "ar_paging/read_path.py:59", "wrapper_line": None}
        ],
        "culprit_pass": "reorder_for_locality",
        "culprit_verified": True,
        "fix": "commit before the window gather",
        "graph_files": {},
        "write_node": "auto_functionalized_v2",
    }
    assert _clone(None).to_dict()["explanation"] is None
    assert CloneReport(clones=[_clone(RAW)]).to_dict()["clones"][0]["explanation"]["cause"] == "read_after_write"


def test_render_copy_and_report_print_the_explanation() -> None:
    report = format_report(CloneReport(clones=[_clone(RAW)], num_regions=1))
    lines = report.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("  - "))
    assert lines[first + 1 : first + 1 + len(RAW.lines())] == [f"      {line}" for line in RAW.lines()]
    assert "culprit pass: reorder_for_locality" in report and "fix: commit before the window gather" in report
    assert render_copy(copy_fields(_clone(RAW))).endswith(f" -- {RAW.summary()}")  # the one-line form
    assert render_copy(copy_fields(_clone(None))).count("\n") == 0


SOURCE = "\n".join(
    ["def forward(self, arg0_1, arg1_1):"]
    + [f"    view_{i} = torch.ops.aten.reshape.default(arg0_1, [-1]);  arg0_1 = None" for i in range(10)]
    + [
        "    clone_default = torch.ops.aten.clone.default(arg1_1)",
        "    index = torch.ops.aten.index.Tensor(arg1_1, [view_1])",
    ]
    + ["    return (index,)"]
)


def test_excerpt_marks_key_lines_compacts_and_elides() -> None:
    rows = excerpt(SOURCE, ["view_2", "clone_default"], context=1)
    assert [r[0] for r in rows] == [3, 4, 5, None, 11, 12, 13]
    assert rows[1] == (4, "    view_2 = aten.reshape(arg0_1, [-1])", True)
    assert rows[3] == (None, "...", False)
    assert rows[5][2] and rows[5][1].strip() == "clone_default = aten.clone(arg1_1)"


def test_side_by_side_columns_are_fixed_width() -> None:
    left = excerpt(SOURCE, ["view_2"], context=0)
    right = excerpt(SOURCE, ["clone_default" + "", "index"], context=0)
    block = side_by_side(left, right, ("before", "after"))
    assert block[0] == "```text" and block[-1] == "```"
    rows = block[3:-1]
    assert rows[0].index(" | ") == 48 and rows[0].startswith(">   4 view_2 = aten.reshape")
    assert rows[0].endswith(">  12 clone_default = aten.clone(arg1_1)")
    assert rows[1].strip().startswith("|")  # left column shorter: an empty cell, the right one goes on


def test_render_explanation_links_user_source(tmp_path: Path) -> None:
    before, after = tmp_path / "f.BEFORE_REINPLACE.0.py", tmp_path / "f.POST_GRAD.0.py"
    before.write_text(SOURCE)
    after.write_text(SOURCE)
    here = short_path(__file__)
    e = Explanation(
        cause="shared_storage",
        reason="r",
        user_line=f"{here}:1",
        fix="f",
        graph_files={"before_reinplace": str(before), "post_grad": str(after)},
        write_node="view_3",
    )
    md = "\n".join(render_explanation(_clone(e), tmp_path))
    assert "### why `k_pool` (layer0.k) is cloned: shared_storage" in md
    link_target = md.split(f"- mutating call: [{here}:1](", 1)[1].split(")", 1)[0]
    assert link_target.endswith("#L1") and (tmp_path / link_target.split("#")[0]).resolve() == Path(__file__).resolve()
    assert "```text" in md and ">   5 view_3 = aten.reshape" in md


def test_user_frames_skip_torch_and_checker_machinery_not_scenarios() -> None:
    import compile_checks.api as api_mod
    import compile_checks.scenarios as scen

    trace = (
        f'  File "{scen.__file__}", line 10, in layer_forward\n    torch.ops.ar_paging.paged_write(k, v, nk, nv, s)\n'
        f'  File "{api_mod.__file__}", line 5, in run\n    x\n'
        f'  File "{torch.__file__}", line 3, in __call__\n    y\n'
    )
    frames = parse_stack_trace(trace)
    assert [f.line for f in frames] == [10, 5, 3] and frames[0].code.startswith("torch.ops.ar_paging")
    assert [is_library_frame(f) for f in frames] == [False, True, True]
    assert not is_library_frame(Frame("/home/user/model.py", 1, "f"))
