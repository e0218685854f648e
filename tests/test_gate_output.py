"""What the gate prints, from plain outcomes (nothing compiles): the live line per case off a terminal,
a passing negative control in one line, bytes per call per region, the verdict column's pool names,
``--timings``' phases, the per-pipeline hint, and the JUnit properties named as ``--json``'s keys."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from compile_checks.gate.junit import PROPERTY_FIELDS, write_junit
from compile_checks.gate.outcome import Outcome
from compile_checks.gate.outputs import _verdict, case_lines, timings_table
from compile_checks.gate.timing import progress_callback
from compile_checks.verdict import bytes_per_call
from compile_checks.vocab import Pipeline

EXPLAINED = "shared_storage: `v_pool` (layer{n}.v) shares one storage with `k_pool`; fix: allocate K and V apart"


def _copy(n: int, region: int, nbytes: int = 131072, pool: str | None = "layer{n}.v") -> dict[str, Any]:
    return {
        "op": "ar_paging::paged_write",
        "arg": "v_pool",
        "pool": pool.format(n=n) if pool else None,
        "nbytes": nbytes,
        "kind": "clone",
        "written_bytes": 0,
        "where": f"region {region} node clone_{n}",
        "explanation": EXPLAINED.format(n=n),
        "shape": [nbytes // 4],
        "dtype": "float32",
        "region": region,
        "node": f"clone_{n}",
    }


def _outcome(label: str = "fused", *, expect_clean: bool = False, copies: int = 2, **kw: Any) -> Outcome:
    clones = [_copy(n, region=1) for n in range(copies)]
    return Outcome(
        label,
        "builtin/stock",
        Pipeline.STOCK,
        expect_clean,
        True,
        clean=not clones,
        clones=clones,
        eager_match=True,
        wall_seconds=1.25,
        report={"clone_bytes_per_run": 131072 * copies * 4},
        **kw,
    )


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


# ---- 1. a CI log: one plain line per finished case, as it finishes ---------------------------------------


def test_off_a_terminal_each_finished_case_is_one_plain_line() -> None:
    stream = _Stream(tty=False)
    done, close = progress_callback(2, True, stream)
    assert done is not None
    done(_outcome("fused"))
    assert stream.getvalue() == "gate [1/2] fused pass 1.2 s\n"  # printed when the case finished, not at the end
    done(_outcome("split", expect_clean=True))  # expected clean, a copy survived: FAIL
    close()
    assert stream.getvalue().splitlines()[1] == "gate [2/2] split FAIL 1.2 s"
    assert "\r" not in stream.getvalue()


def test_on_a_terminal_the_bar_and_with_no_progress_nothing() -> None:
    """The negative controls: a terminal gets the bar (carriage returns), not the lines; --no-progress nothing."""
    tty = _Stream(tty=True)
    done, close = progress_callback(1, True, tty)
    assert done is not None
    done(_outcome())
    close()
    assert "\r" in tty.getvalue() and "gate [1/1]" not in tty.getvalue()
    quiet = _Stream(tty=False)
    assert progress_callback(1, False, quiet)[0] is None and quiet.getvalue() == ""


# ---- 2. a passing negative control: one line; the full story on failure or --verbose -----------------------


def test_a_passing_control_is_one_line_with_count_bytes_and_cause() -> None:
    o = _outcome(copies=3)
    assert o.passed
    (line,) = case_lines(o)
    assert line.startswith("negative control still clones as expected: 3 copies of layer0.v,layer1.v,layer2.v")
    assert "393216 B/call" in line and "cause shared_storage" in line


def test_a_failing_case_and_verbose_keep_every_copy_and_explanation() -> None:
    failing = _outcome(expect_clean=True, copies=3)
    lines = case_lines(failing)
    assert not failing.passed and len(lines) > 3  # each copy, the grouped explanation, the reason
    assert any("layers 0-2 (3 copies): shared_storage" in line for line in lines)
    verbose = case_lines(_outcome(copies=3), verbose=True)
    assert len(verbose) == 3 and all("-- shared_storage" in line for line in verbose)


# ---- 5 and 9. the verdict column: pools by name, bytes per call per region -------------------------------


def test_bytes_per_call_are_per_region_never_summed_across_regions() -> None:
    three_regions = [_copy(n, region=n) for n in range(3)]
    assert bytes_per_call(three_regions) == "131072 B/call in each of 3 regions"
    assert bytes_per_call([_copy(0, 0), _copy(1, 0)]) == "262144 B/call"  # one region: its copies add up
    uneven = [_copy(0, 0, nbytes=65536), _copy(1, 2)]
    assert bytes_per_call(uneven) == "region 0: 65536, region 2: 131072 B/call"


def test_the_verdict_column_names_pools_and_the_callers_tensor_without_one() -> None:
    o = _outcome(copies=2)
    o.clones = [_copy(n, region=n) for n in range(3)]
    cell = _verdict(o)
    assert cell == "3 clone(s)\nlayer0.v,layer1.v,layer2.v\n131072 B/call in each of 3 regions\n1048576 B/run"
    assert "393216" not in cell  # not the three regions' bytes summed as one call
    o.clones = [{**_copy(0, 0, pool=None), "input": "kv_cache['v']"}]
    assert _verdict(o).startswith("1 clone(s)\nkv_cache['v']\n")  # no pool known: the caller's tensor
    o.clones = [_copy(0, 0, pool=None)]  # a record with no input known either: never the op's argument name
    assert _verdict(o).startswith("1 clone(s)\nan unnamed input\n") and "v_pool" not in _verdict(o)


def test_timings_count_dynamo_in_compile_not_in_run_verify() -> None:
    o = _outcome()
    o.phase_seconds = {"dynamo": 2.0, "aot": 1.0}
    o.compile_seconds, o.wall_seconds = 1.0, 4.0  # the backend's compile (aot onwards); dynamo traces before it
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(timings_table([o]))
    row = next(line for line in console.export_text().splitlines() if "fused" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    compile_s, rest, wall = cells[-3:]
    assert (compile_s, rest, wall) == ("3.00", "1.00", "4.00")  # dynamo 2.0 + backend 1.0; 4.0 - 3.0 ran


# ---- 6. the per-pipeline hint states only what the run showed ----------------------------------------------


def _retargeted(observed: dict[str, bool]) -> Outcome:
    """A negative control written for stock (expect_clean=False), re-run under vllm by the gate, clean there."""
    o = _outcome("kv_control[vllm]", copies=0, retargeted_from=Pipeline.STOCK)
    o.pipeline, o.pipeline_verdicts = Pipeline.VLLM, observed
    return o


def test_the_hint_suggests_a_mapping_only_from_verdicts_the_run_showed() -> None:
    both_clean = " ".join(_retargeted({"stock": True, "vllm": True}).failure_reasons())
    assert "expect_clean={" not in both_clean  # stock was clean too: no per-pipeline mapping to suggest
    assert "shows it clean under stock too" in both_clean
    differs = " ".join(_retargeted({"stock": False, "vllm": True}).failure_reasons())
    assert "expect_clean={'stock': False, 'vllm': True}" in differs  # the control: what the run did show
    unseen = " ".join(_retargeted({"vllm": True}).failure_reasons())
    assert "expect_clean={'vllm': True}" in unseen and "did not run it under stock" in unseen


# ---- 3. one vocabulary: JUnit properties are --json's keys ------------------------------------------------


def test_junit_properties_are_the_json_fields(tmp_path: Path) -> None:
    passing, failing = _outcome("fused"), _outcome("split", expect_clean=True)
    write_junit([passing, failing], tmp_path / "j.xml", 1.0)
    cases = list(ET.parse(tmp_path / "j.xml").getroot().iter("testcase"))
    props = [{p.get("name"): p.get("value") for p in tc.iter("property")} for tc in cases]
    assert list(props[0]) == list(PROPERTY_FIELDS)
    for o, p in zip((passing, failing), props):
        d = o.to_dict()
        assert {k: json.loads(v) if k != "pipeline" else v for k, v in p.items()} == {k: d[k] for k in PROPERTY_FIELDS}
    assert props[0]["passed"] == "true" and props[1]["passed"] == "false" and props[1]["clean"] == "false"


@pytest.mark.parametrize("field", PROPERTY_FIELDS)
def test_the_plugins_case_result_has_every_junit_property(field: str) -> None:
    from compile_checks.case import CaseResult

    assert hasattr(CaseResult, field) or field in CaseResult.__dataclass_fields__


def test_a_cases_verdicts_are_gathered_across_its_pipelines_only() -> None:
    from compile_checks.gate.outcome import note_pipeline_verdicts

    def ran(label: str, group: str, pipeline: Pipeline, clean: bool) -> Outcome:
        o = _outcome(label, copies=0 if clean else 1)
        o.group, o.pipeline, o.clean = group, pipeline, clean
        return o

    kv = ran("kv", "t.py:c/stock", Pipeline.STOCK, True)
    kv_vllm = ran("kv[vllm]", "t.py:c/vllm", Pipeline.VLLM, False)
    other_target = ran("kv[vllm]", "u.py:c/vllm", Pipeline.VLLM, True)  # same name, another target: not kv's
    note_pipeline_verdicts([kv, kv_vllm, other_target])
    assert kv.pipeline_verdicts == kv_vllm.pipeline_verdicts == {"stock": True, "vllm": False}
    assert other_target.pipeline_verdicts == {"vllm": True}
