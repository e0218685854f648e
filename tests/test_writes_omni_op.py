"""vLLM-Omni 0.30.0's fused paged op in the LingBot-like blocks, ``regionally_compile(dynamic=True)``, ``--full``.

With the fused layout (K and V halves of one allocation) Inductor's generated code hands the op
``reinterpret_tensor(buf, ..., 0)`` for ``value_pool``: V written at K's offset of the allocation's clone.
Every element the eager graph wrote comes out right; the call also writes V at the previous chunk's
slots. With the real op's schema (``tests/_omni_paged_op.py``) one symbolic graph serves every later
block call, so that first happens at the graph's 4th call (layer 0, chunk 1): only a scan of that call
sees it. The full mode scans every call and names the pool and positions (the first chunk's slots,
16-47); the examples' shorter op gets a fresh graph for the failing call, whose first-call scan sees it
(tests/test_engine_regional.py). Negative control: the ``paged`` layout (K and V apart) passes.
"""

from __future__ import annotations

import pytest
import torch
from _omni_paged_op import omni_case

from compile_checks import run_case
from compile_checks.vocab import WriteProblem

pytestmark = [pytest.mark.compile, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _no_caches() -> None:
    torch._inductor.config.force_disable_caches = True


def test_full_names_the_pool_and_positions_the_miscompile_writes() -> None:
    result = run_case(omni_case("fused_paged", expect_clean=False), analysis_only=False)
    assert not result.passed and result.eager_match is False, result.failure_reasons()
    lost = {f.pool: f for f in result.report.run_findings if f.kind == WriteProblem.LOST_WRITE}
    assert set(lost) == {"layer0.v", "layer1.v"}, result.failure_reasons()
    for f in lost.values():
        assert f.details["compiled_only"]["0"] == list(range(16, 48)), f.details  # chunk 0's slots
        assert f.details["calls"][0] > 1, f.details  # not the graph's first call: a later one's scan found it
    assert any("reinterpret_tensor" in code for s in result.report.sources.values() for code in s.generated)


def test_the_split_pools_pass() -> None:
    result = run_case(omni_case("paged", expect_clean=True), analysis_only=False)
    assert result.passed and result.eager_match and not result.report.run_findings, result.failure_reasons()
