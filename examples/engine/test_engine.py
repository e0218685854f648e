"""The engine's own tests, with the compile_checks pytest plugin (loaded by its entry point).

Run from this folder: ``pytest -q`` (add ``--compile-checks-analysis-only`` for verdicts only).
"""

from __future__ import annotations

import pytest
import torch
from cases import CONFIG, TIMESTEP, build_case
from toy_dit import ToyCausalDiT, allocate_pools, chunk_slots

pytestmark = pytest.mark.compile_checks(analysis_only=True)  # the verdict is what matters here


def test_split_pools_stay_in_place(pool_clone_check):
    result = pool_clone_check.check(build_case("split", expect_clean=True))
    assert result.check_passed and result.eager_match


def test_fused_pools_still_clone(pool_clone_check):
    """Negative control: if this stops cloning, the check has lost its power to see the bug."""
    result = pool_clone_check.check(build_case("fused", expect_clean=False))
    assert {c.pool for c in result.report.clones} >= {"layer0.v"}


def test_engine_loop_in_a_session(pool_clone_check):
    """The host loop written inline, as an engine's test would: commit a chunk, read it back next step."""
    torch.manual_seed(0)
    model = ToyCausalDiT(CONFIG).eval().requires_grad_(False)
    k_pools, v_pools = allocate_pools(CONFIG, "split")
    pools = {f"layer{i}.{kv}": p for i in range(CONFIG.num_layers) for kv, p in (("k", k_pools[i]), ("v", v_pools[i]))}
    with pool_clone_check.session(pools=pools) as s:
        step = s.compile(model)
        for chunk in range(CONFIG.num_chunks):
            write, window = chunk_slots(CONFIG, chunk)
            step(torch.randn(CONFIG.chunk_tokens, CONFIG.dim), TIMESTEP, k_pools, v_pools, write, window)
    assert s.report.clean
    assert bool(k_pools[0][CONFIG.chunk_tokens :].abs().sum(dim=(1, 2)).gt(0).all())  # every chunk committed
