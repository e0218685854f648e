"""A pool folded into a constant by ``freezing=True`` is a failing ``pool_folded`` finding.

The block keeps its K cache as a module buffer: its first region writes the new chunk into it (a
mutated buffer: freezing keeps it an input), a graph break, then the attention region only reads it
(``transpose(...).contiguous()`` of the cache). With ``inductor_config={"freezing": True}`` Inductor
inlines the read-only buffer as a ``_frozen_param`` and constant-folds its transpose: from the second
call on the attention reads the cache as it was at compile time (the verify against eager fails; the
finding does not need it). The negative control is the same case without freezing: it passes.
"""

from __future__ import annotations

import pytest
import torch

from compile_checks import Case, run_case
from compile_checks.vocab import FindingKind

pytestmark = pytest.mark.compile

TOKENS, HEADS, HEAD_DIM, CHUNK = 12, 2, 8, 4


class Block(torch.nn.Module):
    def __init__(self, *, graph_break: bool) -> None:
        super().__init__()
        self.register_buffer("k", torch.zeros(1, TOKENS, HEADS, HEAD_DIM))
        self.proj = torch.nn.Linear(HEAD_DIM, HEAD_DIM)
        self.graph_break = graph_break

    def forward(self, q: torch.Tensor, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        if self.graph_break:
            self.k[:, start:end] = x
            torch._dynamo.graph_break()
        k = self.k.transpose(1, 2).contiguous()
        scores = torch.einsum("bqhd,bhkd->bhqk", self.proj(q), k).softmax(-1)
        return torch.einsum("bhqk,bhkd->bqhd", scores, k)


def _case(*, freezing: bool, graph_break: bool = True) -> Case:
    torch.manual_seed(0)
    block, reference = Block(graph_break=graph_break).eval(), Block(graph_break=graph_break).eval()
    reference.load_state_dict(block.state_dict())
    q = torch.randn(3, 1, CHUNK, HEADS, HEAD_DIM, generator=torch.Generator().manual_seed(0))
    x = torch.randn(3, 1, CHUNK, HEADS, HEAD_DIM, generator=torch.Generator().manual_seed(1))

    def rollout(model: Block):  # type: ignore[no-untyped-def]
        def drive(step):  # type: ignore[no-untyped-def]
            outs = []
            for i in range(3):
                if not model.graph_break:  # the host loop commits the chunk; the compiled block only reads
                    model.k[:, i * CHUNK : (i + 1) * CHUNK] = x[i]
                outs.append(step(q[i], x[i], i * CHUNK, (i + 1) * CHUNK))
            return outs

        return drive

    with torch.no_grad():
        expected = rollout(reference)(reference)

    def verify(outs: list[torch.Tensor]) -> tuple[bool, float]:
        err = max(float((a - b).abs().max()) for a, b in zip(outs, expected, strict=True))
        return err < 1e-4, err

    return Case(
        "frozen" if freezing else "plain",
        block,
        pools={"k": block.k},
        driver=rollout(block),
        verify=verify,
        dynamic=False,
        inductor_config={"freezing": True} if freezing else {},
    )


def _folded(result) -> list:  # type: ignore[no-untyped-def]
    return [f for f in result.report.run_findings if f.kind == FindingKind.POOL_FOLDED]


def test_a_read_only_pool_frozen_into_a_constant_fails() -> None:
    result = run_case(_case(freezing=True), analysis_only=True)
    (finding,) = _folded(result)
    assert not result.passed and not result.check_passed and finding.fails
    assert (finding.pool, finding.region, finding.nbytes) == ("k", 1, TOKENS * HEADS * HEAD_DIM * 4)
    assert finding.constant.startswith("_frozen_param") and finding.shape == (1, TOKENS, HEADS, HEAD_DIM)
    assert "freezing=True" in finding.message and "as an argument" in finding.message  # the fix
    assert finding.to_dict()["kind"] == "pool_folded"
    assert result.eager_match is False  # the truth: the compiled outputs read a stale snapshot


def test_a_pool_only_read_and_frozen_is_folded_not_unreceived() -> None:
    """The only region reads the pool (the host loop writes it): the finding says what happened to it."""
    result = run_case(_case(freezing=True, graph_break=False), analysis_only=True)
    (finding,) = _folded(result)
    assert finding.region == 0 and not result.passed
    assert not result.report.unreceived_pools and not any("never received" in e for e in result.report.errors)


@pytest.mark.parametrize("graph_break", [True, False])
def test_the_same_case_without_freezing_passes(graph_break: bool) -> None:
    result = run_case(_case(freezing=False, graph_break=graph_break), analysis_only=True)
    assert result.passed and not _folded(result) and result.eager_match, result.failure_reasons()
