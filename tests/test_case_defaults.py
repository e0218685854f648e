"""A Case compiles like ``torch.compile`` by default: ``dynamic=None``; ``inductor_config=None`` is no patches.

Truth: ``torch.compile`` itself, its signature's default and the graphs it makes for the same
host loop (counted by a backend of our own). Negative controls: ``Case(dynamic=False)`` makes
the graphs ``torch.compile(dynamic=False)`` makes (more than the default), and a value that is
neither a bool nor None (or an ``inductor_config`` that is no mapping) is a ValueError naming the
field, not a TypeError from deep inside the run.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from compile_checks import Case, run_case
from compile_checks.case.run import check_session

SIZES = (2, 3, 4)  # one token count per step: a size that changes


def _commit(pool: torch.Tensor, slots: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    pool.index_copy_(0, slots, x)
    return x * 2


def _driver(pool: torch.Tensor):
    def drive(step) -> list[torch.Tensor]:
        return [step(pool, torch.arange(n), torch.full((n, 4), float(n))) for n in SIZES]

    return drive


def _torch_graphs(**compile_kwargs: object) -> int:
    """How many graphs plain ``torch.compile`` makes for the driver's steps."""
    graphs = 0

    def counting(gm: torch.fx.GraphModule, example_inputs: object):
        nonlocal graphs
        graphs += 1
        return gm.forward

    torch._dynamo.reset()
    _driver(torch.zeros(8, 4))(torch.compile(_commit, backend=counting, **compile_kwargs))
    torch._dynamo.reset()
    return graphs


def _case(**fields: object) -> Case:
    pool = torch.zeros(8, 4)
    return Case(name="commit", fn=_commit, pools={"pool": pool}, driver=_driver(pool), **fields)


def test_dynamic_defaults_to_torch_compiles_default() -> None:
    assert Case(name="c", fn=_commit).dynamic is None
    assert inspect.signature(torch.compile).parameters["dynamic"].default is None


@pytest.mark.compile
def test_default_case_makes_the_graphs_torch_compile_makes() -> None:
    want = _torch_graphs()
    result = run_case(_case(), analysis_only=True)
    assert result.passed, result.failure_reasons()
    assert result.report.num_regions == want == 2  # static sizes, then one symbolic graph for every later size


@pytest.mark.compile
def test_negative_control_dynamic_false_recompiles_per_size() -> None:
    want = _torch_graphs(dynamic=False)
    result = run_case(_case(dynamic=False), analysis_only=True)
    assert result.report.num_regions == want == len(SIZES) != _torch_graphs()


@pytest.mark.compile
def test_inductor_config_none_is_no_patches() -> None:
    case = _case(inductor_config=None)
    assert case.inductor_config == {}
    assert check_session(case).inductor_config == check_session(_case()).inductor_config
    result = run_case(case, analysis_only=True)
    assert result.passed, result.failure_reasons()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dynamic", "yes", "dynamic must be True, False or None"),
        ("dynamic", 1, "dynamic must be True, False or None"),
        ("inductor_config", ["reorder_for_locality"], "inductor_config must be a mapping"),
    ],
)
def test_negative_control_bad_values_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Case(name="c", fn=_commit, **{field: value})
