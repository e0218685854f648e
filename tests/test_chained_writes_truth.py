"""The ``chained_writes`` rule against Inductor's generated code (plain ``torch.compile``, caches off).

Two writes of one ``(2, ...)`` input, K then V: when either goes into part of a view (``kv[0, :2] = k``)
the generated code allocates a buffer of the input's shape (the earlier write kept functional); whole-view
writes of values of their own (``kv[0] = k; kv[1] = v``, also v1's scatter-back of its clones) are one pass
over the input with no buffer, and the check must claim no copy for them.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

from compile_checks.explain.refusals.replay import explain_refusals
from compile_checks.vocab import Cause

pytestmark = pytest.mark.compile

SHAPE = (2, 16, 8)
_ALLOC = re.compile(r"empty_strided_cpu\(\(([\d, ]*)\)")


def whole_views(x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    kv[0] = x
    kv[1] = 2 * x
    return x.sum()


def parts(x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    kv[0, :2] = x[:2]
    kv[1, :2] = 2 * x[:2]
    return x.sum()


def whole_then_part(x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    kv[0] = x
    kv[1, :2] = 2 * x[:2]
    return x.sum()


def part_then_whole(x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    kv[0, :2] = x[:2]
    kv[1] = 2 * x
    return x.sum()


def _compile(fn) -> tuple[torch.fx.Graph, bool]:  # type: ignore[no-untyped-def]
    """The post-grad graph as the reinplace pass receives it, and whether the generated code allocates a
    buffer of the input's shape (the truth)."""
    graphs: list[torch.fx.Graph] = []

    def keep(graph: torch.fx.Graph) -> None:
        graphs.append(copy.deepcopy(graph))

    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True, post_grad_custom_pre_pass=keep):
        _, codes = run_and_get_code(torch.compile(fn), torch.randn(*SHAPE[1:]), torch.zeros(SHAPE))
    shapes = {tuple(int(d) for d in dims.split(",") if d.strip()) for dims in _ALLOC.findall("\n".join(codes))}
    [graph] = graphs
    return graph, SHAPE in shapes


@pytest.mark.parametrize(
    ("fn", "copies"),
    [(whole_views, False), (parts, True), (whole_then_part, True), (part_then_whole, True)],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_chained_writes_is_claimed_exactly_where_inductor_copies(fn, copies: bool) -> None:  # type: ignore[no-untyped-def]
    graph, allocates = _compile(fn)
    assert allocates is copies  # the truth, read off the generated code
    refusals = explain_refusals(graph)
    assert [r.cause for r in refusals] == ([Cause.CHAINED_WRITES] if copies else []), refusals
