"""Traffic arithmetic on synthetic findings: known clones and region calls, hand-computed bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import pytest
import torch

from compile_checks.check.findings import CloneReport, SurvivingClone
from compile_checks.reports.accounting import bytes_per_run, kernel_bytes_per_run, node_costs
from compile_checks.reports.outputs import markdown_report
from compile_checks.reports.traffic import (
    COLUMNS,
    format_bytes,
    traffic_ratio,
    traffic_row,
    traffic_table,
)

if "written_bytes" in SurvivingClone.__dataclass_fields__:
    Clone = SurvivingClone
else:

    @dataclass(frozen=True)
    class Clone(SurvivingClone):  # type: ignore[no-redef]
        """SurvivingClone with the fields soundness adds (kind, written_bytes), until it lands."""

        kind: str = "functionalization_clone"
        written_bytes: int = 0


def clone_bytes_per_run(report: CloneReport) -> int:
    return bytes_per_run(node_costs("t", report))


MIB = 1 << 20


@dataclass(frozen=True)
class FakeScenario:
    """The fields of compile_checks.scenarios.Scenario that the report reads."""

    name: str = "fake"
    layout: str = "fused"
    num_layers: int = 2
    layers_per_region: int = 1
    dtype: torch.dtype = torch.float32
    num_blocks: int = 64
    block_size: int = 16
    num_kv_heads: int = 2
    head_dim: int = 32
    chunk_size: int = 16
    denoise_steps: int = 3
    batch: int = 1
    dynamic: bool = False
    functionalization: str = "v2"
    expect_clean: bool = False
    window_chunks: int | None = None  # None: no window model, per video = run average x chunks
    sink_chunks: int | None = None


@dataclass
class FakeResult:
    scenario: FakeScenario
    report: CloneReport
    num_steps: int = 9
    num_chunks: int = 3
    ideal_read_bytes: int = 9000
    ideal_write_bytes: int = 900
    compile_seconds: float = 1.5
    wall_seconds: float = 2.5


def _clone(
    nbytes: int,
    region: int,
    node: str = "",
    pool: str | None = None,
    written: int = 0,
    kind: str = "functionalization_clone",
) -> SurvivingClone:
    """A clone whose copy-back writes ``written`` bytes (0: none, so extra = the clone alone)."""
    return Clone(
        op="ar_paging::paged_write",
        arg="v_pool",
        nbytes=nbytes,
        shape=(nbytes // 4,),
        dtype=torch.float32,
        region=region,
        node=node or f"clone_r{region}_{nbytes}",
        pool=pool,
        written_bytes=written,
        kind=kind,
    )


def _report(
    clones: list[SurvivingClone], calls: dict[int, int] | None = None, kernel: dict[int, int] | None = None
) -> CloneReport:
    # 3 chunks x 3 steps, 2 layers, one layer per region: the plain-step region (0) runs
    # 2 x 6 = 12 times, the commit-step region (1) 2 x 3 = 6 times.
    return CloneReport(
        clones=clones,
        num_regions=2,
        region_calls={0: 12, 1: 6} if calls is None else calls,
        region_kernel_bytes={0: 500, 1: 7000} if kernel is None else kernel,
    )


def test_commit_region_clone_counts_once_per_chunk_not_per_step() -> None:
    # 1 MiB clone in the commit region: 2 MiB traffic x 6 calls = 12 MiB over 9 steps / 3 chunks.
    row = traffic_row(FakeResult(FakeScenario(), _report([_clone(MIB, region=1)])), video_chunks=60)
    assert row.surviving_clones == 1
    assert row.extra_bytes_per_step == pytest.approx(12 * MIB / 9)
    assert row.extra_bytes_per_chunk == 4 * MIB
    assert row.extra_bytes_per_video == 240 * MIB


def test_clones_in_two_regions_add_up() -> None:
    # region 1: 2 * 1048576 * 6 = 12582912; region 0: 2 * 1000 * 12 = 24000; total 12606912.
    result = FakeResult(FakeScenario(), _report([_clone(MIB, region=1), _clone(1000, region=0)]))
    assert clone_bytes_per_run(result.report) == 12_606_912
    row = traffic_row(result, video_chunks=10)
    assert row.surviving_clones == 2
    assert row.extra_bytes_per_step == 1_400_768  # 12606912 / 9
    assert row.extra_bytes_per_chunk == 4_202_304  # 12606912 / 3
    assert row.extra_bytes_per_video == 42_023_040
    assert row.video_chunks == 10


def test_one_clone_node_hit_by_two_layers_runs_once_per_call() -> None:
    # A one-layer region called for layer 0 then layer 1: the analysis lists its clone once per
    # pool, but the copy runs once per region call (6 calls), not twice.
    report = _report([_clone(MIB, 1, node="clone_1", pool="layer0.v"), _clone(MIB, 1, node="clone_1", pool="layer1.v")])
    row = traffic_row(FakeResult(FakeScenario(), report))
    assert row.surviving_clones == 2
    assert row.clone_nodes == 1
    assert row.extra_bytes_per_chunk == 4 * MIB  # 2 MiB x 6 calls / 3 chunks
    assert "2 clones (1 distinct copy)" in row.verdict


def test_ideal_is_read_plus_write_averaged_over_steps_and_independent_of_clones() -> None:
    row = traffic_row(
        FakeResult(FakeScenario(), _report([_clone(MIB, region=1), _clone(1000, region=0)])), video_chunks=60
    )
    assert row.ideal_bytes_per_step == 1100  # (9000 + 900) / 9
    assert row.ideal_bytes_per_chunk == 3300
    assert row.ideal_bytes_per_video == 198_000  # no window model: 3300 x 60
    assert row.ideal_video_method == "run average x chunks"
    assert row.traffic_ratio == pytest.approx(1_401_868 / 1100)  # (1100 + 1400768) / 1100


def test_ideal_per_video_uses_the_window_model_when_it_reproduces_the_run() -> None:
    # 2 layers x (K, V) x 256 B per token (2 heads x 32 x fp32) = 1024 B per resident token.
    # Run of 3 chunks, window 2 + sink 1: resident 0, 16, 32 tokens x 3 steps = 144, writes 48.
    s = FakeScenario(window_chunks=2, sink_chunks=1)
    result = FakeResult(s, _report([_clone(MIB, 1)]), ideal_read_bytes=1024 * 144, ideal_write_bytes=1024 * 48)
    row = traffic_row(result, video_chunks=60)
    assert row.ideal_video_method == "window model"
    # 60 chunks: resident 0, 16, 32, then 48 for 57 chunks = 2784 tokens x 3 steps + 960 written
    assert row.ideal_bytes_per_video == 1024 * (2784 * 3 + 960)
    assert row.extra_bytes_per_video == 60 * 4 * MIB
    assert row.video_traffic_ratio == pytest.approx((1024 * 9312 + 240 * MIB) / (1024 * 9312))
    # a run the model does not reproduce falls back to the run average
    off = traffic_row(FakeResult(s, _report([]), ideal_read_bytes=1024 * 144 + 1, ideal_write_bytes=1024 * 48))
    assert off.ideal_video_method == "run average x chunks"


def test_kernel_bytes_weighted_by_region_calls() -> None:
    report = _report([])
    assert kernel_bytes_per_run(report) == 48_000  # 500 * 12 + 7000 * 6
    row = traffic_row(FakeResult(FakeScenario(), report), analysis_only=False)
    assert row.inductor_kernel_bytes_estimate_per_step == pytest.approx(48_000 / 9)
    # analysis-only runs have no kernels: the estimate is not known, never a 0 that looks measured
    assert math.isnan(traffic_row(FakeResult(FakeScenario(), report)).inductor_kernel_bytes_estimate_per_step)


def test_clone_in_a_region_that_never_ran_costs_nothing() -> None:
    report = _report([_clone(MIB, region=2)], calls={0: 12, 1: 6})
    row = traffic_row(FakeResult(FakeScenario(), report))
    assert row.surviving_clones == 1
    assert row.extra_bytes_per_step == 0


def test_clean_run_has_ratio_one_and_clean_verdict() -> None:
    row = traffic_row(FakeResult(FakeScenario(name="split-v2", layout="split", expect_clean=True), _report([])))
    assert row.surviving_clones == 0
    assert row.extra_bytes_per_step == 0
    assert row.traffic_ratio == 1.0
    assert row.verdict.startswith("split-v2: clean")


def test_verdicts_say_expected_or_regression() -> None:
    clones = [_clone(MIB, region=1, node="clone_a"), _clone(MIB, region=1, node="clone_b")]
    control = traffic_row(FakeResult(FakeScenario(name="fused-v2"), _report(clones)))
    assert "expected" in control.verdict and "2 clones" in control.verdict
    assert "2.7 MiB/step" in control.verdict and "x ideal" in control.verdict  # 2 * 2 MiB * 6 / 9 = 2.67 MiB
    regressed = traffic_row(FakeResult(FakeScenario(name="split-v2", expect_clean=True), _report(clones)))
    assert "REGRESSION" in regressed.verdict
    quiet = traffic_row(FakeResult(FakeScenario(name="fused-v2", expect_clean=False), _report([])))
    assert "UNEXPECTEDLY CLEAN" in quiet.verdict


def test_pool_bytes_from_geometry_when_scenario_has_no_property() -> None:
    row = traffic_row(FakeResult(FakeScenario(), _report([])))
    assert row.pool_bytes == 2 * 2 * 64 * 16 * 2 * 32 * 4  # layers * (K,V) * blocks * block * heads * dim * fp32


def test_traffic_ratio_edges() -> None:
    assert traffic_ratio(0, 0) == 1.0
    assert math.isinf(traffic_ratio(0, 10))
    assert traffic_ratio(100, 300) == 4.0


def test_empty_run_and_bad_video_length() -> None:
    row = traffic_row(FakeResult(FakeScenario(), _report([_clone(MIB, 1)]), num_steps=0, num_chunks=0))
    assert row.extra_bytes_per_step == 0 and row.ideal_bytes_per_step == 0
    with pytest.raises(ValueError, match="video_chunks"):
        traffic_row(FakeResult(FakeScenario(), _report([])), video_chunks=0)


def test_format_bytes() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(4 * MIB) == "4.0 MiB"
    assert format_bytes(3 << 30) == "3.0 GiB"


def test_table_and_markdown_have_one_row_per_scenario() -> None:
    rows = [
        traffic_row(FakeResult(FakeScenario(name="split-v2", layout="split", expect_clean=True), _report([]))),
        traffic_row(FakeResult(FakeScenario(name="fused-v2"), _report([_clone(MIB, 1)]))),
    ]
    df = traffic_table(rows)
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == list(COLUMNS)
    assert list(df["case"]) == ["split-v2", "fused-v2"]
    assert list(df["surviving_clones"]) == [0, 1]
    md = markdown_report(df, video_chunks=60)
    assert "| split-v2" in md and "| fused-v2" in md
    assert "60 chunks" in md
    assert md.count("\n- ") == 2  # one verdict line each


def test_copy_back_is_counted_next_to_the_clone() -> None:
    # fused layout: the clone copies the 2-pool storage (2 MiB), the op writes one pool (1 MiB)
    # and that view is copied back: per call 2 * 2 MiB + 2 * 1 MiB = 1.5x the clone alone.
    report = _report([_clone(2 * MIB, region=1, pool="layer0.v", written=MIB)])
    row = traffic_row(FakeResult(FakeScenario(), report))
    assert row.clone_bytes_per_step == pytest.approx(4 * MIB * 6 / 9)
    assert row.copy_back_bytes_per_step == pytest.approx(2 * MIB * 6 / 9)
    assert row.extra_bytes_per_step == pytest.approx(1.5 * row.clone_bytes_per_step)
    assert row.extra_bytes_per_chunk == 6 * MIB * 6 / 3
    assert "clone + copy-back" in row.verdict
    # negative control: leaving the copy-back out (written 0) gives the old, smaller number
    alone = traffic_row(FakeResult(FakeScenario(), _report([_clone(2 * MIB, region=1, pool="layer0.v")])))
    assert alone.extra_bytes_per_step < row.extra_bytes_per_step


def test_node_rows_one_per_copy_with_region_calls() -> None:
    report = _report(
        [
            _clone(2 * MIB, 1, node="clone_1", pool="layer0.v", written=MIB),
            _clone(2 * MIB, 1, node="clone_1", pool="layer1.v", written=MIB),
            _clone(4096, 0, node="index_put", pool="layer0.k", written=4096, kind="aten_write_copy"),
        ]
    )
    rows = node_costs("fused", report)
    assert [(r.node, r.cost, r.bytes_per_call, r.region_calls) for r in rows] == [
        ("clone_1", "clone", 4 * MIB, 6),
        ("clone_1", "copy_back", 2 * MIB, 6),
        ("index_put", "scatter_copy_in", 8192, 12),
        ("index_put", "scatter_copy_out", 8192, 12),
    ]
    assert bytes_per_run(rows) == 6 * MIB * 6 + 16384 * 12


def test_a_report_with_errors_is_an_error_row_not_clean() -> None:
    report = _report([])
    report.errors = ["region 0: no post-grad graph observed"]  # type: ignore[attr-defined]
    row = traffic_row(FakeResult(FakeScenario(name="split", expect_clean=True), report))
    assert row.status == "ERROR" and "ERROR" in row.verdict
    assert traffic_row(FakeResult(FakeScenario(name="split", expect_clean=True), _report([]))).status == "clean"


def test_an_unallowed_blind_spot_is_an_error_row_and_an_allowed_one_is_not() -> None:
    """The report judges a check the way the gate does (``CloneReport.problems``)."""
    report = _report([])
    report.unanalysed = ["region 0 (__compiled_fn_1): backward graph"]
    assert traffic_row(FakeResult(FakeScenario(name="split", expect_clean=True), report)).status == "ERROR"
    report.allow_unanalysed = True
    assert traffic_row(FakeResult(FakeScenario(name="split", expect_clean=True), report)).status == "clean"


def test_a_failing_run_finding_is_a_failed_row_naming_it() -> None:
    """A lost write the gate reports is the row's status, not a clean row (nor the check's "could not decide")."""
    from compile_checks.check.writes import WriteFinding
    from compile_checks.vocab import WriteProblem

    report = _report([])
    lost = WriteFinding(WriteProblem.LOST_WRITE, "layer0.k", "my::commit", "dim 0 [8-11] differ from eager")
    report.run_findings = [lost, WriteFinding(WriteProblem.LOST_WRITE, "layer0.v", "my::commit", "same", fails=True)]
    row = traffic_row(FakeResult(FakeScenario(name="split", expect_clean=True), report))
    assert row.status == "FAILED" and "lost_write on pools layer0.k, layer0.v" in row.verdict
    assert "never taken as the model's ideal" in row.verdict
    # a finding that does not fail (an attributed side-effect write) leaves the row clean
    report.run_findings = [WriteFinding(WriteProblem.SIDE_EFFECT_WRITE, "layer0.k", "v::w", "attributed", fails=False)]
    assert traffic_row(FakeResult(FakeScenario(name="split", expect_clean=True), report)).status == "clean"
