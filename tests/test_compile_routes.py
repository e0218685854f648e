"""Compile routes real engines use under dynamic shapes: dynamo's restarts are never regions.

Under ``dynamic=True`` (or ``mark_dynamic``) a float argument that reaches an opaque op makes AOT
raise ``TensorifyScalarRestartAnalysis`` from inside the backend; dynamo restarts the frame and calls
the backend again. The aborted attempt used to be a region with 0 calls that failed the case
("Inductor compiled no graph through the check's inner compile"). Every route below restarts (the
note says so) and must pass clean; the negative control (the same step on K/V as two halves of one
allocation) must still fail on its copy, so dropping restarted attempts hides no region.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from compile_checks import Case, run_case

pytestmark = pytest.mark.compile


@torch.library.custom_op("routes_test::write_scaled", mutates_args=("k_pool", "v_pool"))
def write_scaled(
    x: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor, scale: float
) -> torch.Tensor:
    k_pool[slots] = x * scale
    v_pool[slots] = x
    return x * scale


@write_scaled.register_fake
def _(x: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


class Block(nn.Module):
    def __init__(self, k: torch.Tensor, v: torch.Tensor) -> None:
        super().__init__()
        self.k, self.v = k, v
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.ops.routes_test.write_scaled(self.lin(x) * scale, self.k, self.v, slots, scale)


class Model(nn.Module):
    _repeated_blocks: ClassVar[list[str]] = ["Block"]  # what vLLM-Omni's regionally_compile looks for

    def __init__(self, fused: bool) -> None:
        super().__init__()
        pairs = [torch.zeros(2, 16, 8).unbind(0) if fused else (torch.zeros(16, 8), torch.zeros(16, 8)) for _ in "ab"]
        self.pools = {f"layer{i}.{n}": t for i, pair in enumerate(pairs) for n, t in zip("kv", pair, strict=True)}
        self.blocks = nn.ModuleList(Block(*pair) for pair in pairs)

    def forward(self, x: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, slots, scale)
        return x


def _drive(step: Callable[..., Any]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [step(torch.randn(4, 8, generator=gen), torch.arange(4) + 4 * c, 0.5 + 0.25 * c) for c in range(3)]


def _per_block(model: Model, **kwargs: Any) -> Callable[[Any], None]:
    def compile_blocks(backend: Any) -> None:
        for block in model.blocks:
            block.forward = torch.compile(block.forward, backend=backend, **kwargs)

    return compile_blocks


def _regional(model: Model) -> Callable[[Any], Model]:
    """vLLM-Omni's ``regionally_compile(model, backend=..., dynamic=True)``: each repeated block's forward."""

    def compile_regions(backend: Any) -> Model:
        for module in model.modules():
            if type(module).__name__ in model._repeated_blocks:
                module.forward = torch.compile(module.forward, backend=backend, dynamic=True)
        return model

    return compile_regions


def _marked(model: Model) -> Callable[[Any], Callable[..., Any]]:
    """``mark_dynamic`` on the token dim, the plain compile of the whole model."""

    def compile_marked(backend: Any) -> Callable[..., Any]:
        compiled = torch.compile(model, backend=backend)

        def step(x: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(slots, 0)
            return compiled(x, slots, scale)

        return step

    return compile_marked


def _marked_blocks(model: Model) -> Callable[[Any], Callable[..., Any]]:
    """Per-block compile without ``dynamic``; the engine marks its token dim dynamic before each step."""

    def compile_marked(backend: Any) -> Callable[..., Any]:
        _per_block(model, fullgraph=True)(backend)

        def step(x: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(slots, 0)
            return model(x, slots, scale)

        return step

    return compile_marked


def _case(route: str, *, fused: bool = False) -> Case:
    model = Model(fused).requires_grad_(False)
    compile_fn = {
        "plain": None,
        "mark_dynamic": _marked(model),
        "per_block": _per_block(model, dynamic=True, fullgraph=True),
        "per_block_mark_dynamic": _marked_blocks(model),
        "regional": _regional(model),
    }[route]
    return Case(
        route,
        model,
        compile=compile_fn,
        dynamic=True if route == "plain" else None,
        driver=_drive,
        pools=model.pools,
        expect_clean=not fused,
        check_writes=False,
    )


@pytest.mark.parametrize("route", ["plain", "mark_dynamic", "per_block", "per_block_mark_dynamic", "regional"])
def test_restarted_compiles_are_no_regions(route: str) -> None:
    result = run_case(_case(route), analysis_only=True)
    restarts = [n for n in result.report.notes if "TensorifyScalarRestartAnalysis" in n]
    assert restarts, f"the route no longer restarts, so this test tests nothing: {result.report.notes}"
    assert result.passed and result.check_passed, result.failure_reasons()
    assert all(calls > 0 for calls in result.report.region_calls.values()), result.report.region_calls
    assert not result.report.unanalysed


def test_negative_control_a_restarted_route_still_fails_on_its_copy() -> None:
    result = run_case(_case("regional", fused=True), analysis_only=True)
    assert any("TensorifyScalarRestartAnalysis" in n for n in result.report.notes), result.report.notes
    assert result.passed and not result.check_passed, result.failure_reasons()  # expect_clean=False: the copy found
    assert {c.pool for c in result.report.clones} == {"layer0.v", "layer1.v"}


def test_a_compile_that_raises_is_named_and_never_passes() -> None:
    """The vllm-piecewise simulation hands each piece dynamo's fake values: a tensorified float's ``.item()``
    raises there and dynamo runs the frame without the region. The case must not pass, and says why."""
    pytest.importorskip("vllm")
    model = Model(fused=False).requires_grad_(False)
    case = Case("pw", model, driver=_drive, pools=model.pools, check_writes=False, pipeline="vllm-piecewise")
    result = run_case(case, analysis_only=True)
    assert not result.passed
    failed = [n for n in result.report.notes if "its compile raised" in n]
    assert failed and "the frame ran without this region, unchecked" in failed[0], result.report.notes
