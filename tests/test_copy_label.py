"""Without ``pools=``, a copy is named by the caller's tensor (dynamo's source of the graph input), never by
the argument name of the ATen op that copies it (``self``)."""

from __future__ import annotations

import pytest
import torch

from compile_checks import Case, run_case
from compile_checks.verdict import copy_fields, copy_names, render_copy

pytestmark = pytest.mark.compile


def _write_both_halves(x: torch.Tensor, kv_cache: dict[str, torch.Tensor]) -> torch.Tensor:
    # K then V into one (2, ...) allocation by plain ATen writes: the first write's result is no write-back,
    # so Inductor keeps it functional (a copy of the allocation)
    kv_cache["full_cache"][0, :, :2] = x
    kv_cache["full_cache"][1, :, :2] = 2 * x
    return x.sum()


@pytest.mark.parametrize("named", [False, True])
def test_an_unnamed_copy_is_labelled_by_the_callers_tensor(named: bool) -> None:
    cache = {"full_cache": torch.zeros(2, 4, 16, 8)}
    x = torch.randn(4, 2, 8)
    pools = {"layer0.full": cache["full_cache"]} if named else {}
    result = run_case(
        Case("label", _write_both_halves, args=(x, cache), pools=pools, expect_clean=False), analysis_only=True
    )
    copies = [copy_fields(c) for c in [*result.report.clones, *result.report.other_clones]]
    assert copies and {c["arg"] for c in copies} == {"self"}, copies  # the ATen argument the copy feeds
    label = copy_names(copies)
    assert label == ("layer0.full" if named else "kv_cache['full_cache']"), label
    assert "self" not in label
    assert all(c["input"] == "kv_cache['full_cache']" for c in copies), copies
    # why: the first write is kept functional because a second write of its result follows (not Inductor's "other")
    assert {c.explanation.cause for c in [*result.report.clones, *result.report.other_clones]} == {"chained_writes"}
    line = render_copy(copies[0])
    assert ("(pool layer0.full)" if named else "(no pool named: kv_cache['full_cache'])") in line, line
