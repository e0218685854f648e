"""The write and recompile checks on ``examples/engine_blocks`` (a causal DiT compiled per block as in
production, its pools in a cache object, named by a pools callable): its three cache writes get the
verdicts its docstring names, and the per-block compile shows up as recompiles.

``paged_write`` (declared) is the clean twin; ``side_effect`` (vLLM's pattern copied: a dummy consumed by
attention) is an ``undeclared_write``; ``lost`` (the dummy unused) is a ``lost_write``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from compile_checks.case import run_case

pytestmark = pytest.mark.compile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "engine_blocks"))
from cases import build_case  # noqa: E402  (the example's own case factory)


@pytest.mark.parametrize(
    ("write", "kinds"), [("paged_write", []), ("side_effect", ["undeclared_write"]), ("lost", ["lost_write"])]
)
def test_the_three_cache_writes(write: str, kinds: list[str]) -> None:
    result = run_case(build_case(write, write=write), analysis_only=True)
    found = sorted({str(f.kind) for f in result.report.run_findings if f.fails})
    assert found == kinds, result.report.run_findings
    assert all(f.op == "blocks_example::kv_update" for f in result.report.run_findings)
    assert result.passed is (not kinds), result.report.problems
    if write == "lost":
        pools = {f.pool for f in result.report.run_findings}
        assert pools == {"layer0.k", "layer0.v", "layer1.k", "layer1.v"}


@pytest.mark.slow
def test_per_block_compile_is_one_graph_per_block() -> None:
    """One code object (``Block.forward``), one graph per block: dynamo guards on the block's index."""
    result = run_case(build_case("split"), analysis_only=True)
    [(code, entry)] = result.report.recompiles.items()
    assert code.startswith("forward (blocks_dit.py:")
    assert entry["graphs"] == 2 and entry["reasons"] == ["0/0: self.index == 0"]
    assert result.passed, result.report.problems
    over = run_case(build_case("split", max_recompiles=0), analysis_only=True)
    assert [str(f.kind) for f in over.report.run_findings] == ["too_many_recompiles"] and not over.passed
    assert run_case(build_case("split", max_recompiles=1), analysis_only=True).passed
