"""Recompiles: graphs per compiled function with dynamo's guard failures; ``Case(max_recompiles=N)``.

Negative control: a step that branches on ``current_start_frame == 0`` and is fed two chunk sizes
recompiles (as the real model's block did, once per guard combination); over the limit it fails
with ``too_many_recompiles`` naming the function and the guard failures. Clean twin: the same step
fed one shape and a start frame that stays on one branch compiles once and passes ``max_recompiles=0``.
"""

from __future__ import annotations

import pytest
import torch

from compile_checks.case import Case, run_case
from compile_checks.check.recompiles import RecompileLog, recompile_findings, recompile_table
from compile_checks.vocab import CompileProblem

pytestmark = pytest.mark.compile


def block_step(cache: torch.Tensor, x: torch.Tensor, current_start_frame: int) -> torch.Tensor:
    rows = torch.arange(x.shape[0])
    if current_start_frame == 0:
        cache.index_copy_(0, rows, x)
    else:
        cache.index_add_(0, rows, x)
    return x * 2


def _case(calls: list[tuple[int, int]], **kw) -> Case:
    cache = torch.zeros(16, 4)

    def driver(step):
        return [step(cache, torch.ones(n, 4), start) for start, n in calls]

    return Case("block", block_step, pools={"cache": cache}, driver=driver, **kw)


def _block_entry(report) -> tuple[str, dict]:
    [(code, entry)] = [(c, e) for c, e in report.recompiles.items() if c.startswith("block_step (")]
    return code, entry


def test_recompiles_counted_with_guard_failures() -> None:
    result = run_case(_case([(0, 4), (1, 4), (0, 8), (1, 8)]), analysis_only=True)
    code, entry = _block_entry(result.report)
    assert code.startswith("block_step (test_recompiles.py:")
    assert entry["graphs"] >= 2, entry
    assert len(entry["reasons"]) == entry["graphs"] - 1
    assert entry["regions"] == sorted(entry["regions"]) and len(entry["compile_ids"]) == entry["graphs"]
    text = " ".join(entry["reasons"])
    assert "current_start_frame" in text or "size" in text, text
    # no limit set: counted, not failed
    assert result.passed, result.report.problems
    assert result.report.to_dict()["recompiles"][code]["graphs"] == entry["graphs"]


def test_max_recompiles_fails_the_case() -> None:
    result = run_case(_case([(0, 4), (1, 4), (0, 8), (1, 8)], max_recompiles=1), analysis_only=True)
    _, entry = _block_entry(result.report)
    found = [f for f in result.report.run_findings if f.kind == CompileProblem.TOO_MANY_RECOMPILES]
    assert len(found) == 1 and found[0].graphs == entry["graphs"] and found[0].limit == 1
    assert "block_step" in found[0].message and "guard failures:" in found[0].message
    assert not result.passed
    assert any(p.startswith("too_many_recompiles: block_step") for p in result.report.problems)


def test_an_int_start_frame_recompiles_per_chunk() -> None:
    """A second negative control: under ``dynamic=False`` the start frame as a Python int is specialised
    per value, so a rollout recompiles per chunk (3 chunks, 3 graphs) even on one branch and one shape."""
    result = run_case(_case([(1, 4), (2, 4), (3, 4)], max_recompiles=0, dynamic=False), analysis_only=True)
    _, entry = _block_entry(result.report)
    assert entry["graphs"] == 3, entry
    assert entry["reasons"][0] == "0/0: current_start_frame == 1"
    assert not result.passed


def test_an_int_start_frame_recompiles_once_by_default() -> None:
    """Case's default ``dynamic=None`` (torch.compile's): the int is specialised once, then made symbolic
    (2 graphs for 3 chunks), still over ``max_recompiles=0``."""
    result = run_case(_case([(1, 4), (2, 4), (3, 4)], max_recompiles=0), analysis_only=True)
    _, entry = _block_entry(result.report)
    assert entry["graphs"] == 2, entry
    assert entry["reasons"][0] == "0/0: current_start_frame == 1"
    assert not result.passed


def test_same_shape_same_branch_compiles_once_under_limit_zero() -> None:
    result = run_case(_case([(1, 4), (1, 4), (1, 4)], max_recompiles=0), analysis_only=True)
    _, entry = _block_entry(result.report)
    assert entry["graphs"] == 1 and entry["reasons"] == []
    assert result.passed, result.report.problems


def test_limit_hit_is_reported() -> None:
    """Past dynamo's recompile limit the check counts the graphs the run needs (dynamo compiles on, counted),
    and the case fails on the hit and on max_recompiles."""
    import torch._dynamo.config as dynamo_config

    from compile_checks.vocab import CompileProblem

    with dynamo_config.patch(recompile_limit=1):
        result = run_case(_case([(0, 4), (0, 5), (0, 6)], max_recompiles=0), analysis_only=True)
    _, entry = _block_entry(result.report)
    assert entry["graphs"] == 2 and len(entry["reasons"]) == 1  # 4, then one graph for the dynamic size
    [hit] = [f for f in result.report.run_findings if f.kind == CompileProblem.RECOMPILE_LIMIT_HIT]
    assert "the run needed 2 graphs" in hit.message and "recompile_limit = 2" in hit.message, hit.message
    assert not result.passed


def test_findings_unit() -> None:
    class R:
        def __init__(self, i: int, code: str) -> None:
            self.index, self.code, self.compile_id, self.compiled_fn_name = i, code, f"0/{i}", f"__compiled_fn_{i}"

    log = RecompileLog(reasons={"f (a.py:1)": ["0/0: L['x'].size()[0] == 4"]})
    table = recompile_table([R(0, "f (a.py:1)"), R(1, "f (a.py:1)"), R(2, "g (a.py:9)")], log)
    assert table["f (a.py:1)"]["graphs"] == 2 and table["g (a.py:9)"]["graphs"] == 1
    # pieces of one split graph (one compile id) are one graph
    pieces = [R(0, "f (a.py:1)"), R(1, "f (a.py:1)")]
    for r in pieces:
        r.compile_id = "0/0"
    pieces = recompile_table(pieces, RecompileLog())
    assert pieces["f (a.py:1)"]["graphs"] == 1 and pieces["f (a.py:1)"]["regions"] == [0, 1]
    assert recompile_findings(table, None) == []
    assert [f.code for f in recompile_findings(table, 0)] == ["f (a.py:1)"]
    assert recompile_findings(table, 1) == []
    with pytest.raises(ValueError, match="max_recompiles"):
        Case("x", block_step, max_recompiles=-1)
