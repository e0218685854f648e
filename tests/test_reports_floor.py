"""The per-region floor (plain torch.compile stopped after the post-grad passes) beside the check."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from compile_checks.case import Case
from compile_checks.reports.floor import FloorRun, FloorTable, check_run, floor_run


def _two_regions(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    y = (x * 2).sum()
    torch._dynamo.graph_break()  # a second compiled region
    k[0] = x.sum(0)
    return y + k.sum()


def _case() -> Case:
    k = torch.zeros(8, 4)
    return Case(name="two", fn=_two_regions, args=(k, torch.ones(3, 4)), pools={"k": k})


@pytest.mark.compile
def test_floor_and_check_time_the_same_regions_and_the_floor_runs_no_codegen() -> None:
    from torch._inductor.graph import GraphLowering

    with mock.patch.object(GraphLowering, "compile_to_module", side_effect=AssertionError("codegen ran")):
        floor = floor_run(_case())
    check = check_run(_case())
    assert len(floor.region_seconds) == len(check.region_seconds) == 2
    assert all(s > 0 for s in floor.region_seconds + check.region_seconds)


def test_table_reads_floor_and_check_side_by_side() -> None:
    table = FloorTable("c", floor=[1.0, 2.0], check=[1.5, 2.0], floor_wall=4.0, check_wall=5.0)
    lines = table.lines()
    assert "1.50x" in lines[2] and "1.00x" in lines[3]  # region 0 costs the check half again, region 1 nothing
    assert lines[-2].split()[:3] == ["total", "3.000", "3.500"]
    assert FloorRun().region_seconds == []
