"""Baseline comparison: growth in clones or extra bytes fails; same or smaller passes; bad files exit early."""

from __future__ import annotations

import json

import pytest

from compile_checks.reports.baseline import (
    BaselineEntry,
    BaselineError,
    compare,
    dump_baseline,
    load_baseline,
)

OLD = {"split-v2": BaselineEntry(0, 0.0), "fused-v2": BaselineEntry(2, 4096.0)}


def test_same_passes() -> None:
    cmp = compare(OLD, dict(OLD))
    assert cmp.ok and not cmp.regressions and not cmp.improved


def test_more_clones_fails() -> None:
    cmp = compare(OLD, {"split-v2": BaselineEntry(1, 0.0), "fused-v2": BaselineEntry(2, 4096.0)})
    assert not cmp.ok
    assert [r.scenario for r in cmp.regressions] == ["split-v2"]
    assert "surviving_clones 0 -> 1" in cmp.regressions[0].describe()


def test_more_bytes_same_clones_fails() -> None:
    cmp = compare(OLD, {"fused-v2": BaselineEntry(2, 8192.0)})
    assert not cmp.ok
    assert "extra_bytes_per_step 4096 -> 8192" in cmp.regressions[0].describe()
    assert "surviving_clones" not in cmp.regressions[0].describe()


def test_fewer_clones_or_bytes_passes_and_is_reported_improved() -> None:
    cmp = compare(OLD, {"fused-v2": BaselineEntry(1, 2048.0)})
    assert cmp.ok and cmp.improved == ["fused-v2"]


def test_fewer_clones_but_more_bytes_still_fails() -> None:
    cmp = compare(OLD, {"fused-v2": BaselineEntry(1, 5000.0)})
    assert not cmp.ok


def test_float_noise_is_not_growth() -> None:
    cmp = compare({"a": BaselineEntry(1, 1398101.3333333333)}, {"a": BaselineEntry(1, 12 * 2**20 / 9)})
    assert cmp.ok
    assert not compare({"a": BaselineEntry(1, 1000.0)}, {"a": BaselineEntry(1, 1001.0)}).ok


def test_new_scenario_is_not_a_failure() -> None:
    cmp = compare(OLD, {"list-v2": BaselineEntry(3, 1.0)})
    assert cmp.ok and cmp.new_scenarios == ["list-v2"]


def test_round_trip(tmp_path) -> None:
    path = tmp_path / "b.json"
    path.write_text(dump_baseline(OLD))
    assert load_baseline(path) == OLD
    assert json.loads(path.read_text())["fused-v2"] == {"surviving_clones": 2, "extra_bytes_per_step": 4096.0}


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"a": {"surviving_clones": 1}}'])
def test_bad_baseline_is_a_clear_error(tmp_path, text: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(BaselineError, match=str(path)):
        load_baseline(path)


def test_missing_baseline_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(BaselineError, match="cannot read"):
        load_baseline(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ('{"surviving_clones": 0, "extra_bytes_per_step": NaN}', "finite"),
        ('{"surviving_clones": NaN, "extra_bytes_per_step": 0}', "finite"),
        ('{"surviving_clones": 0, "extra_bytes_per_step": Infinity}', "finite"),
        ('{"surviving_clones": 0, "extra_bytes_per_step": "12"}', "must be a number"),
        ('{"surviving_clones": true, "extra_bytes_per_step": 0}', "must be a number"),
        ('{"surviving_clones": -1, "extra_bytes_per_step": 0}', ">= 0"),
        ('{"surviving_clones": 1.5, "extra_bytes_per_step": 0}', "whole number"),
        ('{"surviving_clones": 0}', "lacks extra_bytes_per_step"),
        ('{"surviving_clones": 0, "clone_bytes_per_step": 0}', "lacks extra_bytes_per_step"),
        ("[0, 0]", "must be an object"),
    ],
)
def test_invalid_entries_are_refused(tmp_path, entry: str, says: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(f'{{"split": {entry}}}')
    with pytest.raises(BaselineError, match=says):
        load_baseline(path)


def test_nan_baseline_would_pass_everything_if_loaded() -> None:
    # negative control for the check above: a NaN entry compares false with any run, so a
    # compare() against it reports no regression even for a huge growth
    cmp = compare({"split": BaselineEntry(0, float("nan"))}, {"split": BaselineEntry(0, 1e12)})
    assert cmp.ok
