"""Readable output (issue 18.4/18.5): explanations grouped per layers, JUnit failure types, --verbose."""

from __future__ import annotations

from compile_checks.explain.grouping import group_explanations, group_label
from compile_checks.gate.junit import failure_type
from compile_checks.gate.outcome import Outcome
from compile_checks.gate.outputs import case_lines
from compile_checks.vocab import FailureType, Pipeline

WHY = "shared_storage: `v_pool` (layer{i}.v) shares one storage with `k_pool` (layer{i}.k) ({b} bytes); fix: split"


def _copy(i: int, b: int, why: str = WHY) -> dict:
    return {
        "op": "ar_paging::paged_write",
        "arg": "v_pool",
        "pool": f"layer{i}.v",
        "nbytes": b,
        "kind": "functionalization_clone",
        "written_bytes": 0,
        "where": f"region 0 node c{i}",
        "region": 0,
        "node": f"c{i}",
        "shape": [b // 4],
        "dtype": "float32",
        "explanation": why.format(i=i, b=b),
    }


def _outcome(**kw) -> Outcome:
    base = dict(
        label="fused", group="t/stock", pipeline=Pipeline.STOCK, expect_clean=True, analysis_only=True, clean=True
    )
    return Outcome(**{**base, **kw})


def test_identical_explanations_are_printed_once_per_group_of_layers() -> None:
    copies = [_copy(0, 8192), _copy(1, 16384), _copy(2, 16384), _copy(3, 64, why="read_after_write: other {i} {b}")]
    groups = group_explanations([(c["pool"], c["explanation"]) for c in copies])
    assert [(label, n) for label, _, n in groups] == [("layers 0-2", 3), ("layer 3", 1)]
    # a failing case lists every copy (a passing negative control is one line: tests/test_gate_output.py)
    lines = case_lines(_outcome(clean=False, clones=copies, expect_clean=True))
    assert sum("shared_storage" in line for line in lines) == 1  # was one per layer
    assert lines[4].startswith("layers 0-2 (3 copies): shared_storage: `v_pool` (layer0.v)")
    assert all("8192 bytes" in line or "16384" in line or "64" in line for line in lines[:4])  # each copy's line
    verbose = case_lines(_outcome(clean=False, clones=copies, expect_clean=True), verbose=True)
    assert sum("shared_storage" in line for line in verbose) == 3


def test_group_label_names_pools_without_layers() -> None:
    assert group_label(["cache.k", None]) == "cache.k, <unnamed input>"
    assert group_label(["layer0.k", "layer0.v"]) == "layer 0"


def test_junit_failure_type_says_what_failed() -> None:
    assert failure_type(_outcome(clean=False, clones=[_copy(0, 8)])) == FailureType.CLONE
    assert failure_type(_outcome(expect_clean=False)) == FailureType.CLONE  # a negative control lost its clone
    blind = _outcome(check_errors=["not analysed: region 0: backward graph"], report={"unanalysed": ["backward"]})
    assert failure_type(blind) == FailureType.BLIND_SPOT
    assert failure_type(_outcome(check_errors=["lost_write: ..."])) == FailureType.CHECK_ERROR
    assert failure_type(_outcome(eager_match=False, max_abs_diff=0.5)) == FailureType.MISMATCH
    allowed = _outcome(check_errors=["x"], report={"unanalysed": ["backward"], "allow_unanalysed": True})
    assert failure_type(allowed) == FailureType.CHECK_ERROR


def test_a_dump_failure_is_printed_and_does_not_fail_the_case() -> None:
    o = _outcome(report={"dump_failures": ["depyf failed writing its full_code_* files on exit: RecursionError"]})
    assert o.passed and case_lines(o) == [
        "dump failed (the verdict stands): depyf failed writing its full_code_* files on exit: RecursionError"
    ]
