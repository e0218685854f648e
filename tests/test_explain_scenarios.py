"""End to end: real compiles (analysis-only), every surviving clone explained, and explained right.

The explanation is checked against the user's source itself: the ``file:line`` it names must be
the line holding the mutating call / the window gather, so a wrong line fails.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import ar_paging  # noqa: F401 - registers torch.ops.ar_paging.paged_write
from compile_checks.api import CloneCheck, format_report
from compile_checks.case import run_case
from compile_checks.check.findings import SurvivingClone
from compile_checks.explain import culprit_pass as pass_bisect
from compile_checks.explain.user_source import absolute_path
from compile_checks.scenarios import SCENARIOS, scenario_case

N, H, D, T, W = 256, 2, 8, 8, 16


@torch.library.custom_op("explain_tests::attend", mutates_args=())
def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """An attention kernel as an opaque custom op returning one tensor."""
    s = torch.einsum("thd,shd->hts", q, k).softmax(-1)
    return torch.einsum("hts,shd->thd", s, v).contiguous()


@attend.register_fake
def _attend_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q)


def attention_then_commit(x, k_pool, v_pool, win_slots, commit_slots, wq, wk, wv):  # type: ignore[no-untyped-def]
    """Window gather, one-tensor attention op, commit right after it, then use the attention output."""
    q, k_new, v_new = ((x @ w).view(T, H, D) for w in (wq, wk, wv))
    k_win = k_pool.index_select(0, win_slots)
    v_win = v_pool.index_select(0, win_slots)
    o = attend(q, k_win, v_win)
    torch.ops.ar_paging.paged_write(k_pool, v_pool, k_new, v_new, commit_slots)
    return o.reshape(T, H * D) @ wq


def hoist_commit(graph: torch.fx.Graph) -> None:
    """A user's post-grad pass that moves each functionalized commit up to right after its last input."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    for n in list(graph.nodes):
        if n.target is torch.ops.higher_order.auto_functionalized_v2:
            max(n.all_input_nodes, key=order.__getitem__).append(n)


def run_step(**check_kwargs) -> CloneCheck:  # type: ignore[no-untyped-def]
    k, v = torch.zeros(N, H, D), torch.zeros(N, H, D)
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(H * D, H * D, generator=g) for _ in range(3)]
    args = (torch.randn(T, H * D, generator=g), k, v, torch.arange(W), torch.arange(100, 100 + T), *weights)
    with torch.no_grad(), CloneCheck(pools={"layer0.k": k, "layer0.v": v}, analysis_only=True, **check_kwargs) as check:
        check.compile(attention_then_commit)(*args)
    return check


def source_at(location: str | None) -> str:
    assert location is not None, "no user line"
    path = absolute_path(location)
    assert path is not None, f"{location} does not name an existing file"
    return path.read_text().splitlines()[int(location.rsplit(":", 1)[1]) - 1]


def expect(
    c: SurvivingClone,
    cause: str,
    call: str,
    read: str | None = None,
    culprit: str | None = None,
    verified: bool = False,
    fix: str = "",
) -> None:
    """Assert the explanation of ``c``; every named line is checked against the source file."""
    e = c.explanation
    assert e is not None, f"clone {c.node} has no explanation"
    assert e.cause == cause, e.summary()
    assert call in source_at(e.user_line), f"{e.user_line} is not the mutating call"
    if read is not None:
        assert e.conflicting and read in source_at(e.conflicting[0].user_line), e.lines()
    assert (e.culprit_pass, e.culprit_verified) == (culprit, verified), e.lines()
    assert fix in e.fix


def small(name: str):  # type: ignore[no-untyped-def]
    s = SCENARIOS[name]
    return dataclasses.replace(s, num_chunks=2, denoise_steps=1)


def test_fused_scenario_is_shared_storage() -> None:
    report = run_case(scenario_case(small("fused")), analysis_only=True).report
    assert len(report.clones) == 2
    for c in report.clones:
        layer = c.pool.split(".")[0]
        expect(c, "shared_storage", "paged_write", fix="allocate K and V as separate tensors")
        assert f"`v_pool` ({layer}.v) shares one storage with `k_pool` ({layer}.k)" in c.explanation.reason
        assert c.to_dict()["explanation"]["cause"] == "shared_storage"
    assert "why: shared_storage: `v_pool` (layer0.v) shares one storage with `k_pool` (layer0.k)" in format_report(
        report
    )


def test_read_after_write_scenario_blames_reorder_for_locality_verified() -> None:
    report = run_case(scenario_case(small("read_after_write")), analysis_only=True).report
    assert sorted(c.arg for c in report.clones) == ["k_pool", "k_pool", "v_pool", "v_pool"]
    for c in report.clones:
        # the read is named at the model's line, with the ar_paging function it read through after it
        expect(
            c,
            "read_after_write",
            "paged_write",
            read="gather_window",
            culprit="reorder_for_locality",
            verified=True,
            fix="inductor_compile_config={'reorder_for_locality': False}",
        )
        assert c.explanation.conflicting[0].op == "aten::index"
        assert c.explanation.conflicting[0].wrapper_line.startswith("ar_paging/read_path.py:")
        assert "index_select" in source_at(c.explanation.conflicting[0].wrapper_line)


def test_commit_after_one_tensor_attention_op_is_read_after_write() -> None:
    report = run_step().report
    assert sorted(c.arg for c in report.clones) == ["k_pool", "v_pool"]
    for c in report.clones:
        expect(
            c,
            "read_after_write",
            "paged_write",
            read="index_select",
            culprit="reorder_for_locality",
            verified=True,
            fix="torch.compile(fn, options={'reorder_for_locality': False})",
        )
    # the printed fix, applied in a fresh compile, removes the clones
    assert run_step(inductor_config={"reorder_for_locality": False}).report.clean


def test_users_custom_pass_is_named_culprit() -> None:
    report = run_step(inductor_config={"reorder_for_locality": False, "post_grad_custom_pre_pass": hoist_commit}).report
    assert sorted(c.arg for c in report.clones) == ["k_pool", "v_pool"]
    for c in report.clones:
        expect(
            c,
            "read_after_write",
            "paged_write",
            read="index_select",
            culprit="post_grad_custom_pre_pass",
            verified=True,
            fix="disabled_passes = 'post_grad_custom_pre_pass'",
        )


def test_clean_case_gets_no_explanation_and_no_rerun(monkeypatch: pytest.MonkeyPatch) -> None:
    reruns: list[str] = []
    real = pass_bisect.cloned_without_pass
    monkeypatch.setattr(pass_bisect, "cloned_without_pass", lambda *a: reruns.append(a[2]) or real(*a))
    check = run_step(inductor_config={"reorder_for_locality": False})
    assert check.report.clean and reruns == []
    assert all(not r.refusals for r in check.explain_recorder.records)
    # negative control: the same instrumentation sees the re-run when a clone survives
    run_step()
    assert reruns == ["reorder_for_locality"]


def test_explain_false_attaches_nothing() -> None:
    report = run_step(explain=False).report
    assert report.clones and all(c.explanation is None for c in report.clones)


def test_a_wrong_explanation_fails() -> None:
    """The checks above are not vacuous: a wrong cause, line, culprit or fix is an AssertionError."""
    [k_clone, _] = sorted(run_step().report.clones, key=lambda c: c.arg)
    expect(
        k_clone, "read_after_write", "paged_write", read="index_select", culprit="reorder_for_locality", verified=True
    )
    wrong = [
        dict(cause="shared_storage", call="paged_write"),
        dict(cause="read_after_write", call="index_select"),  # the read's line is not the mutating call
        dict(cause="read_after_write", call="paged_write", read="paged_write"),
        dict(cause="read_after_write", call="paged_write", read="index_select", culprit=None),
        dict(
            cause="read_after_write",
            call="paged_write",
            read="index_select",
            culprit="reorder_for_locality",
            verified=True,
            fix="allocate K and V as separate tensors",
        ),
    ]
    for kwargs in wrong:
        with pytest.raises(AssertionError):
            expect(k_clone, **kwargs)  # type: ignore[arg-type]


def test_dump_index_shows_explanation_side_by_side(tmp_path: Path) -> None:
    check = run_step(dump_dir=tmp_path)
    report, fn = check.report, check.probe.regions[0].compiled_fn_name  # depyf numbers regions per process
    assert (tmp_path / f"{fn}.BEFORE_REINPLACE.0.py").is_file() and (tmp_path / f"{fn}.POST_GRAD.0.py").is_file()
    c = next(c for c in report.clones if c.arg == "k_pool")
    assert c.graph_file is not None and c.graph_file.endswith("POST_GRAD.0.py")
    assert f"{c.node} = torch.ops.aten.clone.default" in Path(c.graph_file).read_text().splitlines()[c.line - 1]
    index = (tmp_path / "index.md").read_text()
    assert f"## `{fn}` (region 0)" in index
    assert "### why `k_pool` (layer0.k) is cloned: read_after_write" in index
    assert "- culprit pass: `reorder_for_locality` (verified: disabling it removes the clone)" in index
    block = index.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0].startswith("before reinplacing") and "| after post-grad passes" in block[0]
    # ">" marks the write on the left (before reinplacing) and the clone on the right (after)
    assert any(row.startswith(">") and "auto_functionalized_v2" in row.split(" | ")[0] for row in block)
    assert any(
        row.split(" | ")[1].startswith(">") and f"{c.node} = aten.clone" in row for row in block[2:] if " | " in row
    )
    assert all(row[48:51] in (" | ", " |") for row in block[2:])  # the left column is 48 wide (99 in all)
    # a key line is never cut: the write (longer than the column) goes on under itself, whole
    keys = [cell for row in block[2:] for cell in (row[:48], row[51:]) if cell.startswith(">")]
    assert keys and not any(cell.rstrip().endswith("~") for cell in keys)
    left = "".join(row[6:48].rstrip() for row in block[2:])
    assert "_all_bases = [" in left and "auto_functionalized_v2(ar_paging.paged_write" in left
    # the user's source lines are links that resolve from the dump folder
    link = index.split("- mutating call: [", 1)[1].split("\n", 1)[0]
    target = link.split("](", 1)[1].rstrip(")").split("#L")[0]
    assert (tmp_path / target).resolve() == Path(__file__).resolve()
