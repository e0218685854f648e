"""Compile like the engine: ``Case.compile`` (per block, in place), ``CloneCheck.backend``, fullgraph / mode.

The block-compiled example (examples/engine_blocks) compiles each block's ``forward`` with the
check's backend, as vLLM-Omni does; one compiled code object serves every block, so each copy
must be attributed to the block's own pool. Negative control: an engine compile that bypasses the
check's backend must not pass as clean.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from compile_checks import Case, run_case
from compile_checks.api import CloneCheck, CompileCheckError
from compile_checks.pools import pools_from_module

BLOCKS = Path(__file__).resolve().parent.parent / "examples" / "engine_blocks"
sys.path.insert(0, str(BLOCKS))

from blocks_dit import BlocksDiT, KVCache, chunk_slots, compile_blocks, rollout  # noqa: E402
from cases import CONFIG, build_case  # noqa: E402

pytestmark = pytest.mark.compile


@pytest.fixture(autouse=True)
def _no_caches() -> None:
    torch._inductor.config.force_disable_caches = True


def test_per_block_compile_split_is_clean() -> None:
    result = run_case(build_case("split"), analysis_only=True)
    assert result.passed and result.check_passed and result.eager_match is True, result.failure_reasons()


def test_per_block_compile_fused_attributes_each_block_to_its_own_pool() -> None:
    result = run_case(build_case("fused", layout="fused", expect_clean=False), analysis_only=True)
    assert result.passed and not result.check_passed, result.failure_reasons()
    assert sorted(c.pool for c in result.report.clones) == ["layer0.v", "layer1.v"]
    pool_bytes = CONFIG.num_slots * CONFIG.heads * CONFIG.head_dim * 4
    assert all(c.nbytes == 2 * pool_bytes for c in result.report.clones)  # v2 clones the layer's whole (2, ...) base


def test_negative_control_engine_compile_that_bypasses_the_check_is_not_clean() -> None:
    """The engine compiles its blocks with plain Inductor, not the backend it was handed."""
    case = build_case("bypass", layout="fused").replace(compile=lambda backend: compile_blocks(case.fn, "inductor"))
    result = run_case(case, analysis_only=True)
    assert not result.passed and result.report.problems, "a case whose regions were never observed passed"


def test_session_form_takes_the_public_backend() -> None:
    cache = KVCache(CONFIG, "fused")
    torch.manual_seed(0)
    model = BlocksDiT(CONFIG, cache).eval().requires_grad_(False)
    noise = torch.randn(CONFIG.num_chunks, CONFIG.chunk_tokens, CONFIG.dim)
    pools = {f"layer{i}.{kv}": getattr(cache.layers[i], kv) for i in range(CONFIG.num_layers) for kv in "kv"}
    with CloneCheck(pools=pools, analysis_only=True) as check:
        compile_blocks(model, check.backend)
        rollout(CONFIG, noise)(model)
    assert check.report is not None
    assert sorted(c.pool for c in check.report.clones) == ["layer0.v", "layer1.v"]


def test_fullgraph_and_mode_reach_torch_compile() -> None:
    def step(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        k.index_copy_(0, torch.arange(2), x)
        print("graph break")  # fullgraph=True must refuse this
        return k.sum()

    k = torch.zeros(4, 3)
    with pytest.raises(CompileCheckError, match="Failed to trace"):  # an error under fullgraph, not a split graph
        run_case(Case("fg", step, args=(k, torch.ones(2, 3)), pools={"k": k}, fullgraph=True), analysis_only=True)
    split = run_case(Case("no-fg", step, args=(torch.zeros(4, 3), torch.ones(2, 3))), analysis_only=True)
    assert split.check_passed  # the control: without fullgraph the same step compiles around the break
    k2 = torch.zeros(4, 3)
    moded = run_case(
        Case(
            "mode",
            lambda k, x: k.index_copy_(0, torch.arange(2), x).sum(),
            args=(k2, torch.ones(2, 3)),
            pools={"k": k2},
            mode="max-autotune-no-cudagraphs",
        ),
        analysis_only=True,
    )
    assert moded.passed and moded.check_passed, moded.failure_reasons()
    assert bool((k2[:2] == 1).all())


def test_case_rejects_contradictory_compile_fields() -> None:
    with pytest.raises(ValueError, match="fullgraph / mode"):
        Case("x", lambda: None, compile=lambda backend: None, fullgraph=True)
    with pytest.raises(ValueError, match="vllm-piecewise"):
        Case("x", lambda: None, compile=lambda backend: None, pipeline="vllm-piecewise")


def _rebuilding_case(pools_callable: bool) -> Case:
    """The fused cache is rebuilt (new tensors, same names) after the first chunk, as an engine
    that reallocates its cache between requests does."""
    case = build_case("rebuilt", layout="fused", expect_clean=False, check_writes=False).replace(verify=None)
    model, cfg = case.fn, CONFIG
    cache = model.kv_cache
    noise = torch.randn(cfg.num_chunks, cfg.chunk_tokens, cfg.dim)

    def drive(step):  # type: ignore[no-untyped-def]
        outs = []
        for c in range(cfg.num_chunks):
            if c == 1:
                cache.layers = KVCache(cfg, "fused").layers
            outs.append(step(noise[c], torch.tensor([0.5]), *chunk_slots(cfg, c)))
        return torch.stack(outs)

    names = {f"layers.{i}.{kv}": f"layer{i}.{kv}" for i in range(cfg.num_layers) for kv in "kv"}
    snapshot = pools_from_module(cache, names=names)
    return case.replace(
        driver=drive, pools=(lambda: pools_from_module(cache, names=names)) if pools_callable else snapshot
    )


def test_a_pools_callable_follows_a_rebuilt_cache() -> None:
    result = run_case(_rebuilding_case(pools_callable=True), analysis_only=True)
    assert result.passed and not result.report.other_clones, result.failure_reasons()
    assert {c.pool for c in result.report.clones} == {"layer0.v", "layer1.v"}


def test_negative_control_a_pools_snapshot_loses_the_rebuilt_cache() -> None:
    """A plain mapping names the first tensors only: the rebuilt cache's copies match no named pool."""
    result = run_case(_rebuilding_case(pools_callable=False), analysis_only=True)
    assert [(c.pool, c.nbytes) for c in result.report.other_clones] == [(None, 8192), (None, 8192)]
