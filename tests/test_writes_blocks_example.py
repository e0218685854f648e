"""The write checks on ``examples/engine_blocks`` (a causal DiT with its pools in a cache object): its three
cache writes get the verdicts its docstring names, and per-block compile shows up as recompiles.

``paged_write`` (declared) is the clean twin; ``side_effect`` (vLLM's pattern copied: a dummy consumed by
attention) is an ``undeclared_write``; ``lost`` (the dummy unused) is a ``lost_write``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from compile_checks.api import CloneCheck
from compile_checks.case import Case, run_case
from compile_checks.pools import pools_from_module

pytestmark = pytest.mark.compile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "engine_blocks"))
blocks = pytest.importorskip("blocks_dit")


def _case(write: str) -> Case:
    cfg = blocks.BlocksConfig()
    cache = blocks.KVCache(cfg)
    model = blocks.BlocksDiT(cfg, cache, write).eval()
    noise = torch.randn(cfg.num_chunks, cfg.chunk_tokens, cfg.dim, generator=torch.Generator().manual_seed(0))
    return Case(write, model, pools=pools_from_module(cache, "layers.*"), driver=blocks.rollout(cfg, noise))


@pytest.mark.parametrize(("write", "kinds"), [("paged_write", []), ("side_effect", ["undeclared_write"]),
                                               ("lost", ["lost_write"])])
def test_the_three_cache_writes(write: str, kinds: list[str]) -> None:
    with torch.no_grad():
        result = run_case(_case(write), analysis_only=True)
    found = sorted({str(f.kind) for f in result.report.run_findings})
    assert found == kinds, result.report.run_findings
    assert all(f.op == "blocks_example::kv_update" for f in result.report.run_findings)
    assert result.passed is (not kinds), result.report.problems


def test_per_block_compile_recompiles_per_block() -> None:
    """vLLM-Omni's per-block compile: one code object, one graph per block (a guard on the block's index)."""
    case = _case("paged_write")
    model = case.fn
    check = CloneCheck(pools=dict(case.pools), analysis_only=True)
    with check, torch.no_grad():
        blocks.compile_blocks(model, check.probe.backend)
        case.driver(model)
    assert check.report is not None and check.report.check_passed, check.report.problems
    [(code, entry)] = check.report.recompiles.items()
    assert code.startswith("forward (blocks_dit.py:")
    assert entry["graphs"] == blocks.BlocksConfig().num_layers
    assert entry["reasons"] == ["0/0: self.index == 0"]
