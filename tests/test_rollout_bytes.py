"""Bytes per run beside bytes per call: what a rollout really moved is per call x region calls."""

from __future__ import annotations

import torch

from compile_checks.api import format_report
from compile_checks.check.findings import CloneReport, SurvivingClone


def _clone(region: int, nbytes: int, pool: str) -> SurvivingClone:
    return SurvivingClone(
        op="ar_paging::paged_write",
        arg="v_pool",
        nbytes=nbytes,
        shape=(nbytes // 4,),
        dtype=torch.float32,
        pool=pool,
        layer=region,
        node="clone_default",
        region=region,
    )


def test_per_run_bytes_multiply_each_copy_by_its_regions_calls() -> None:
    report = CloneReport(clones=[_clone(0, 1024, "layer0.v"), _clone(1, 4096, "layer1.v")], region_calls={0: 3, 1: 2})
    assert report.clone_bytes == 5120
    assert report.clone_bytes_per_run == 3 * 1024 + 2 * 4096
    assert report.to_dict()["clone_bytes_per_run"] == 11264
    headline = format_report(report).splitlines()[0]
    # per call of each region (a call runs one region's copies), never the regions summed as one call
    assert "region 0: 1024, region 1: 4096 B/call" in headline and "11264 bytes over the 5 region call(s)" in headline
    assert "5120" not in headline


def test_negative_control_per_call_bytes_understate_a_rollout() -> None:
    """The old headline (per execution of the regions) is not what a 5-call rollout moved."""
    report = CloneReport(clones=[_clone(0, 1024, "layer0.v")], region_calls={0: 5})
    assert report.clone_bytes != report.clone_bytes_per_run == 5 * report.clone_bytes
