"""A Case runs its step as an engine does, under ``torch.no_grad()``, unless ``Case(no_grad=False)``.

The newcomer's model: an ``nn.Module`` built as usual (its parameters require grad), no
``torch.no_grad()`` in the step, and a commit into K/V views of one allocation (``k[slots] = k_new``).
With autograd on, the first write gives the view autograd history and dynamo's fake-tensor conversion
of it fails inside torch (``AssertionError: False != True``). Truth: the run itself (the step sees
autograd off; the compiled run returns what eager does). Negative control: ``no_grad=False`` runs it
with autograd on, and the error names the user's line and the cause instead of torch's bare assertion.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from compile_checks import Case, run_case
from compile_checks.api import CompileCheckError

pytestmark = pytest.mark.compile

SLOTS, H, D = 16, 2, 4


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kv = nn.Linear(H * D, 2 * H * D)  # requires grad, as any nn.Module's parameters
        self.grad_seen: list[bool] = []

    def forward(self, x: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor):
        self.grad_seen.append(torch.is_grad_enabled())
        k, v = self.kv(x).view(-1, 2, H, D).unbind(1)
        k_pool[slots] = k  # the commit
        v_pool[slots] = v
        return k_pool.index_select(0, slots).sum() + v_pool.index_select(0, slots).sum()


_LINES, _FIRST = inspect.getsourcelines(_Layer.forward)
# the commit into V: the write into K gave the one allocation autograd history, V's view then fails
_COMMIT_LINE = _FIRST + next(i for i, line in enumerate(_LINES) if "v_pool[slots] = v" in line)


def _case(**kw: object) -> tuple[Case, _Layer]:
    torch.manual_seed(0)
    layer = _Layer()
    kv = torch.zeros(2, SLOTS, H, D)  # K and V: two views of one allocation
    x = torch.randn(4, H * D)

    def drive(step):
        return [step(x, kv[0], kv[1], torch.arange(4) + 4 * i) for i in range(2)]

    return Case("tiny", layer, pools={"l0.k": kv[0], "l0.v": kv[1]}, driver=drive, **kw), layer  # type: ignore[arg-type]


def test_the_step_runs_without_autograd_by_default() -> None:
    assert Case("c", lambda: None).no_grad is True
    case, layer = _case(check_writes=False)
    result = run_case(case, analysis_only=True)
    assert result.check_errors == [], result.check_errors
    assert layer.grad_seen and not any(layer.grad_seen), layer.grad_seen
    assert torch.is_grad_enabled()  # put back after the run


def test_no_grad_false_runs_with_autograd_and_names_the_line_and_the_cause() -> None:
    case, _ = _case(no_grad=False, check_writes=False)
    with pytest.raises(CompileCheckError) as e:
        run_case(case, analysis_only=True)
    message = str(e.value)
    assert f"at test_case_no_grad.py:{_COMMIT_LINE}" in message, message
    assert "autograd was on" in message and "Case(no_grad=False)" in message, message


def test_no_grad_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="no_grad must be True or False"):
        Case("c", lambda: None, no_grad="yes")  # type: ignore[arg-type]
