"""Random writes are no finding; a write dropped in the same step still is.

Inductor draws its own random numbers (unless ``fallback_random=True``), so the compiled run's random
values, and positions computed from them, differ from the eager run's by design, whatever RNG state both
start from. Dropout and ``bernoulli`` written into a zeroed cache land on the pre-image by chance (a false
"never written" per element): such a write is judged whole. Slots chosen by ``argsort(rand)`` make the
compiled run write other positions (a false "started from another state"): such writes are compared by
count. The negative controls drop a write in the same step (an op with an unused output that declares no
mutation: AOT autograd's dead-code elimination drops it, ``_writes_call_ops``): still a ``lost_write``.
"""

from __future__ import annotations

import _writes_call_ops as ops
import pytest
import torch

from compile_checks import Case, run_case
from compile_checks.vocab import WriteProblem

pytestmark = pytest.mark.compile

HEADS, TOKENS, HEAD_DIM, CHUNK, CALLS = 2, 16, 8, 4, 3


def noise_step(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    k.index_copy_(2, pos, torch.nn.functional.dropout(x, p=0.5, training=True))
    v.index_copy_(2, pos, torch.bernoulli(torch.full_like(x, 0.5)))
    return k.sum() + v.sum()


def noise_step_dropped(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    k.index_copy_(2, pos, torch.nn.functional.dropout(x, p=0.5, training=True))
    torch.ops.w39_tests.hidden_seq_write(torch.bernoulli(torch.full_like(x, 0.5)), pos)  # dropped by the compile
    return k.sum()


def slot_step(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    slots = torch.argsort(torch.rand(TOKENS))[:CHUNK]
    k.index_copy_(2, slots, x)
    v.index_copy_(2, slots, x * 2)
    return k.sum() + v.sum()


def slot_step_dropped(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    slots = torch.argsort(torch.rand(TOKENS))[:CHUNK]
    k.index_copy_(2, slots, x)
    torch.ops.w39_tests.hidden_seq_write(x * 2, slots)  # dropped by the compile
    return k.sum()


STEPS = {f.__name__: f for f in (noise_step, noise_step_dropped, slot_step, slot_step_dropped)}


def _case(step: str) -> Case:
    k, v = torch.zeros(1, HEADS, TOKENS, HEAD_DIM), torch.zeros(1, HEADS, TOKENS, HEAD_DIM)
    x = torch.randn(CALLS, 1, HEADS, CHUNK, HEAD_DIM, generator=torch.Generator().manual_seed(0))

    def driver(compiled):  # type: ignore[no-untyped-def]
        ops.CONTEXT["pool"] = v
        return [compiled(k, v, x[i], torch.arange(CHUNK) + CHUNK * i) for i in range(CALLS)]

    return Case(step, STEPS[step], pools={"k": k, "v": v}, driver=driver, dynamic=False)


def _findings(result) -> dict[str, list]:  # type: ignore[no-untyped-def]
    out: dict[str, list] = {}
    for f in result.report.run_findings:
        out.setdefault(f.pool, []).append(f)
    return out


@pytest.mark.parametrize("analysis_only", [True, pytest.param(False, marks=pytest.mark.slow)])
@pytest.mark.parametrize("step", ["noise_step", "slot_step"])
def test_a_step_that_samples_noise_passes(step: str, analysis_only: bool) -> None:
    torch.manual_seed(0)
    result = run_case(_case(step), analysis_only=analysis_only)
    assert result.passed and not result.report.run_findings, result.failure_reasons()


@pytest.mark.parametrize("analysis_only", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_a_dropped_random_write_in_that_step_is_still_lost(analysis_only: bool) -> None:
    """Its values drawn at random: every element of the write left as it was is a dropped write."""
    torch.manual_seed(0)
    result = run_case(_case("noise_step_dropped"), analysis_only=analysis_only)
    found = _findings(result)
    assert set(found) == {"v"} and not result.passed, result.failure_reasons()
    (f,) = found["v"]
    assert f.kind == WriteProblem.LOST_WRITE and f.details["calls"] == [1, 2, 3], f.message
    assert f.details["unwritten_rows"] == list(range(CHUNK)), f.details  # call 1's positions along dim 2


def test_a_dropped_write_at_random_slots_is_still_lost() -> None:
    """Its positions drawn at random: compared by count, none of eager's are written anywhere."""
    torch.manual_seed(0)
    result = run_case(_case("slot_step_dropped"), analysis_only=True)
    found = _findings(result)
    assert set(found) == {"v"} and not result.passed, result.failure_reasons()
    (f,) = found["v"]
    assert f.kind == WriteProblem.LOST_WRITE and f.details["random_positions"], f.message
    assert (f.details["eager_count"], f.details["compiled_count"]) == (CHUNK, 0)
    assert "drawn from the RNG" in f.message
