"""A case built without values that cannot be checked without them says so in one line, naming the user's line.

Two ways: the program reads a value (``.item()``, ``nonzero``: torch's fake tensors refuse, deep in ATen), and a
meta pool held as a module global (left on meta beside the converted FakeTensors, the compile fails in Inductor).
Each has its negative control: the same program on real tensors runs, and a pool the case holds is not refused.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ar_paging.paged_write  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
from compile_checks import Case, run_case
from compile_checks.errors import UsageError

pytestmark = pytest.mark.compile


def _value_case(kind: str, device: str) -> Case:
    with torch.device(device):
        k, v = torch.zeros(16, 2, 8), torch.zeros(16, 2, 8)
        new, slots = torch.ones(4, 2, 8), torch.arange(4)

    def step(k: torch.Tensor, v: torch.Tensor, new: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        torch.ops.ar_paging.paged_write(k, v, new, new, slots)
        if kind == "item":
            n = int(slots.max().item())  # the value read
            return new[:n]
        return new[torch.nonzero(slots)[:, 0]]  # the value-sized output

    return Case(name=kind, fn=step, args=(k, v, new, slots), pools={"layer0.k": k, "layer0.v": v})


@pytest.mark.parametrize(
    ("kind", "line", "what"),
    [("item", "n = int(slots.max().item())", "reads a tensor's value"), ("nonzero", "torch.nonzero", "size depends")],
)
def test_a_value_read_on_meta_is_one_line_naming_the_users_line(kind: str, line: str, what: str) -> None:
    with pytest.raises(UsageError) as refused:
        run_case(_value_case(kind, "meta"), analysis_only=True)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("this case needs values: test_needs_values.py:")
    assert line in message and what in message and "built on meta" in message and "real tensors" in message
    # negative control: the same program on real tensors is checked
    assert run_case(_value_case(kind, "cpu"), analysis_only=True).clean


POOL_K = torch.zeros(16, 2, 8, device="meta")
POOL_V = torch.zeros(16, 2, 8, device="meta")


def _global_step(new: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    torch.ops.ar_paging.paged_write(POOL_K, POOL_V, new, new, slots)  # the pools: module globals
    return new + 1


def _held_step(pools: tuple[torch.Tensor, torch.Tensor]) -> Any:
    def step(new: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        torch.ops.ar_paging.paged_write(pools[0], pools[1], new, new, slots)  # held in the closure
        return new + 1

    return step


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    with torch.device("meta"):
        return torch.ones(4, 2, 8), torch.arange(4)


def test_a_meta_pool_held_as_a_module_global_is_one_line_naming_it() -> None:
    case = Case(name="global", fn=_global_step, args=_inputs(), pools={"layer0.k": POOL_K, "layer0.v": POOL_V})
    with pytest.raises(UsageError) as refused:
        run_case(case, analysis_only=True)
    message = str(refused.value)
    assert "\n" not in message
    assert "`POOL_K`" in message and "module global" in message and "test_needs_values.py:" in message
    assert "_global_step" in message and "pass it as an argument" in message
    # negative control: the same pools held by the case (a closure) are converted and checked
    with torch.device("meta"):
        k, v = torch.zeros(16, 2, 8), torch.zeros(16, 2, 8)
    held = Case(name="held", fn=_held_step((k, v)), args=_inputs(), pools={"layer0.k": k, "layer0.v": v})
    result = run_case(held, analysis_only=True)
    assert result.clean and result.analysis_only
