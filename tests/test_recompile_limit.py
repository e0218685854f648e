"""Dynamo's recompile limit hit by a per-block compile: the case says so, naming the config, the function,
the number of blocks and the fix.

Negative control: 9 blocks of one class, each specialising on its layer index, compiled one by one with
``fullgraph=True`` under the default limit (8): dynamo's bare "Hard failure due to fullgraph=True"
becomes a CompileCheckError naming ``torch._dynamo.config.recompile_limit``, the function and the 9
blocks. Clean twin: the same blocks with the limit raised to 9 pass. Without fullgraph, dynamo would
silently run the blocks past the limit eagerly: the case fails with ``recompile_limit_hit``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from compile_checks.api import CompileCheckError
from compile_checks.case import Case, run_case
from compile_checks.check.recompile_limit import LimitHit, limit_message, raised_by_limit
from compile_checks.vocab import CompileProblem


class IndexedBlock(nn.Module):
    """A block that specialises on its own layer index (as a block reading ``cache.layers[self.index]`` does)."""

    def __init__(self, index: int, cache: torch.Tensor) -> None:
        super().__init__()
        self.index, self.cache = index, cache

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache[self.index].copy_(x)
        return x * (self.index + 1)


class Stack(nn.Module):
    def __init__(self, blocks: int) -> None:
        super().__init__()
        self.cache = torch.zeros(blocks, 4)
        self.blocks = nn.ModuleList(IndexedBlock(i, self.cache) for i in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _case(blocks: int, *, fullgraph: bool) -> Case:
    model = Stack(blocks)

    def compile_blocks(backend):  # vLLM-Omni's per-block compile
        for block in model.blocks:
            block.forward = torch.compile(block.forward, backend=backend, fullgraph=fullgraph, dynamic=False)

    return Case(
        "blocks",
        model,
        compile=compile_blocks,
        driver=lambda step: step(torch.ones(4)),
        pools={"cache": model.cache},
        check_writes=False,
    )


@pytest.mark.compile
def test_nine_fullgraph_blocks_name_the_limit_and_the_fix() -> None:
    with pytest.raises(CompileCheckError) as err:
        run_case(_case(9, fullgraph=True), analysis_only=True)
    text = str(err.value)
    assert "torch._dynamo.config.recompile_limit (8)" in text, text
    assert "forward (test_recompile_limit.py:" in text, text
    assert "9 blocks of class IndexedBlock" in text, text
    assert "recompile_limit = 9" in text and "isolate_recompiles=True" in text, text
    assert type(err.value.__cause__).__name__ == "FailOnRecompileLimitHit"


@pytest.mark.compile
def test_nine_blocks_pass_with_the_limit_raised() -> None:
    with torch._dynamo.config.patch(recompile_limit=9):
        result = run_case(_case(9, fullgraph=True), analysis_only=True)
    assert result.passed, result.report.problems
    [entry] = result.report.recompiles.values()
    assert entry["graphs"] == 9


@pytest.mark.compile
def test_without_fullgraph_the_eager_fallback_fails_the_case() -> None:
    with torch._dynamo.config.patch(recompile_limit=2):
        result = run_case(_case(3, fullgraph=False), analysis_only=True)
    [hit] = [f for f in result.report.run_findings if f.kind == CompileProblem.RECOMPILE_LIMIT_HIT]
    assert "torch._dynamo.config.recompile_limit (2)" in hit.message and "3 blocks" in hit.message, hit.message
    assert "eagerly" in hit.message
    assert not result.passed


def test_messages_without_blocks_and_for_the_accumulated_limit() -> None:
    plain = limit_message(LimitHit("step (engine.py:3)", "recompile_limit", 8, "", 0), raised=False)
    assert "step (engine.py:3) hit torch._dynamo.config.recompile_limit (8): 8 graphs of it" in plain
    assert "eagerly" in plain and "recompile_limit = 9" in plain
    total = limit_message(LimitHit("step (engine.py:3)", "accumulated_recompile_limit", 256, "", 0), raised=True)
    assert "torch._dynamo.config.accumulated_recompile_limit (256)" in total and "FailOnRecompileLimitHit" in total


def test_raised_by_limit_follows_the_cause_chain() -> None:
    from torch._dynamo.exc import FailOnRecompileLimitHit

    try:
        try:
            raise FailOnRecompileLimitHit("Hard failure due to fullgraph=True")
        except FailOnRecompileLimitHit as inner:
            raise CompileCheckError("step raised under the check", phase="run") from inner
    except CompileCheckError as outer:
        assert raised_by_limit(outer)
    assert not raised_by_limit(RuntimeError("another failure"))
    assert not raised_by_limit(None)


def _token_case(counts: list[int], *, fullgraph: bool = False) -> Case:
    """Two blocks of one class that share every graph; the graphs come from the token counts a rollout sees."""

    class Shared(nn.Module):
        def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
            cache[: x.shape[0]].copy_(x)
            return x * 2

    cache = torch.zeros(16, 4)
    blocks = nn.ModuleList([Shared(), Shared()])

    def model(x: torch.Tensor) -> torch.Tensor:
        for block in blocks:
            x = block(x, cache)
        return x

    def compile_blocks(backend):  # type: ignore[no-untyped-def]
        for block in blocks:
            block.forward = torch.compile(block.forward, backend=backend, fullgraph=fullgraph, dynamic=False)

    return Case(
        "tokens",
        model,
        compile=compile_blocks,
        driver=lambda step: [step(torch.ones(n, 4)) for n in counts],
        pools={"cache": cache},
        check_writes=False,
    )


@pytest.mark.compile
def test_the_message_names_the_graphs_token_counts_need() -> None:
    """6 token counts, limit 3: the run needs 6 graphs of the shared forward, not limit + 1 = 4."""
    with torch._dynamo.config.patch(recompile_limit=3):
        result = run_case(_token_case([4, 5, 6, 7, 8, 9]), analysis_only=True)
    [hit] = [f for f in result.report.run_findings if f.kind == CompileProblem.RECOMPILE_LIMIT_HIT]
    assert "the run needed 6 graphs of it" in hit.message and "recompile_limit = 6" in hit.message, hit.message
    assert "recompile_limit = 4" not in hit.message
    assert not result.passed
    # the control: the limit the message names is enough, and no lower one is
    with torch._dynamo.config.patch(recompile_limit=6):
        enough = run_case(_token_case([4, 5, 6, 7, 8, 9]), analysis_only=True)
    assert enough.passed, enough.report.problems
    assert [e["graphs"] for e in enough.report.recompiles.values()] == [6]
    with torch._dynamo.config.patch(recompile_limit=5):
        short = run_case(_token_case([4, 5, 6, 7, 8, 9]), analysis_only=True)
    assert not short.passed


def test_count_cap_message_says_more_than() -> None:
    from compile_checks.check.recompile_limit import COUNT_CAP, LimitLog, graphs_needed

    hit = LimitHit("f (a.py:1)", "recompile_limit", 8, "", 0, counting=True)
    log = LimitLog(hits=[hit], past_limit={"f (a.py:1)": COUNT_CAP - 8}, capped={"f (a.py:1)"})
    need = graphs_needed(log, hit)
    assert need == (COUNT_CAP, False)
    text = limit_message(hit, raised=False, needed=need)
    assert f"more than {COUNT_CAP} graphs" in text and "recompile_limit = " not in text, text
    exact = graphs_needed(LimitLog(hits=[hit], past_limit={"f (a.py:1)": 4}), hit)
    assert exact == (12, True)
    assert "recompile_limit = 12" in limit_message(hit, raised=False, needed=exact)
