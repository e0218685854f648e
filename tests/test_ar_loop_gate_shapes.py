"""Issue 16: the built-in gate's two new shapes, held to the code Inductor generates for them.

* ``evict_gather_commit`` / ``evict_gather_commit_after``: evict (``k[evicted] = 0``), gather the
  window, commit, in one region (item 1's loop).
* ``cross_layer_kv`` / ``cross_layer``: one ``(L, 2, N, H, D)`` allocation, one region reused for
  every layer (item 4's loop): each layer's copy is attributed to that layer.

One full compile per shape (commit graph and non-commit graph, 4 chunks so chunk 3 evicts
chunk 1, one denoising step per chunk), then the verdict against the pool-sized buffers.
"""

from __future__ import annotations

import dataclasses

import pytest
from _ar_loop_steps import pool_sized_allocations
from torch._inductor.utils import run_and_get_code

from compile_checks.case import run_case
from compile_checks.scenarios import (
    DEFAULT_GATE_CLEAN,
    DEFAULT_GATE_NEGATIVE,
    SCENARIOS,
    scenario_case,
)

pytestmark = pytest.mark.compile

NEW = {
    "evict_gather_commit": True,
    "evict_gather_commit_after": False,
    "cross_layer_kv": True,
    "cross_layer": False,
}


def test_the_new_shapes_are_in_the_default_gate_with_their_controls() -> None:
    for name, clean in NEW.items():
        assert SCENARIOS[name].expect_clean is clean
        assert name in (DEFAULT_GATE_CLEAN if clean else DEFAULT_GATE_NEGATIVE)


@pytest.mark.parametrize("name", list(NEW))
def test_verdict_equals_the_generated_code(name: str) -> None:
    s = dataclasses.replace(SCENARIOS[name], denoise_steps=1)
    result, codes = run_and_get_code(run_case, scenario_case(s))
    report = result.report
    code = sorted(b for c in codes for b in pool_sized_allocations(c, s.pool_bytes))
    reported = sorted({(c.region, c.node): c.nbytes for c in report.clones + report.other_clones}.values())
    assert reported == code
    assert result.passed and result.eager_match, (report.errors, result.notes)
    assert (code == []) is NEW[name]
    if s.layout == "cross_layer":
        # one region for every layer: each layer's V copy is attributed to that layer
        assert sorted({c.pool for c in report.clones}) == [f"layer{i}.v" for i in range(s.num_layers)]
        # one denoising step per chunk: every step commits, one region reused by every layer
        assert report.region_calls == {0: s.num_chunks * s.num_layers}
    if s.evict_in_region and not NEW[name]:
        assert sorted({c.pool for c in report.clones}) == [f"layer{i}.{kv}" for i in range(s.num_layers) for kv in "kv"]
