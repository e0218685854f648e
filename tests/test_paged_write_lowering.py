"""``ar_paging.lowering``: compiled ``paged_write`` as Inductor's own scatter, against eager.

The lowering is on by default on CPU; each test says which side it needs (``lowered``). The
negative controls: a deliberately wrong lowering (accumulating instead of overwriting) fails the
same comparison the real one passes, and out-of-range slots (negative ones included, which a plain
``index_put_`` would wrap) are refused.
"""

from __future__ import annotations

import os
import re
import sys

import _warm_python as warm_python
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_paged_write import reference_write
from torch._inductor import config as inductor_config
from torch._inductor.utils import run_and_get_code

import ar_paging
from ar_paging import lowering

pytestmark = pytest.mark.compile

H, D = 2, 4
OP_CALL = "torch.ops.ar_paging.paged_write.default("


def commit(k_pool, v_pool, a, b, slots):
    """The producer (``a + b``, ``a - b``) is what the lowering lets Inductor fuse into the store."""
    torch.ops.ar_paging.paged_write(k_pool, v_pool, a + b, a - b, slots)


@pytest.fixture
def lowered(monkeypatch):
    """Set the lowering on or off for one test, with fresh compiles (dynamo and Inductor caches off)."""

    def set_to(enabled: bool) -> None:
        monkeypatch.setattr(lowering, "_enabled", enabled)
        torch._dynamo.reset()

    with inductor_config.patch(force_disable_caches=True):
        yield set_to
    torch._dynamo.reset()


def compiled_code(args) -> str:
    _, codes = run_and_get_code(torch.compile(commit, fullgraph=True, dynamic=False), *args)
    return codes[-1].split("def call(", 1)[1]


def make_args(num_slots: int, batch: int | None, chunk: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    shape = (chunk, H, D) if batch is None else (batch, chunk, H, D)
    tokens = chunk if batch is None else batch * chunk
    slots = torch.randperm(num_slots, generator=gen)[:tokens]
    slots = slots if batch is None else slots.reshape(batch, chunk)
    k_pool, v_pool = torch.randn(num_slots, H, D, generator=gen), torch.randn(num_slots, H, D, generator=gen)
    return k_pool, v_pool, torch.randn(shape, generator=gen), torch.randn(shape, generator=gen), slots


def check_compiled_equals_eager(args) -> None:
    """The compiled commit leaves the pools exactly as the token-by-token reference does."""
    k_pool, v_pool, a, b, slots = args
    want = reference_write(k_pool, v_pool, a + b, a - b, slots)
    got = (k_pool.clone(), v_pool.clone())
    torch.compile(commit, fullgraph=True, dynamic=False)(*got, a, b, slots)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), "compiled commit differs from eager"


def test_the_lowered_step_calls_no_op_and_fuses_the_producer(lowered):
    args = make_args(16, None, 4, seed=0)
    lowered(True)
    code = compiled_code(args)
    assert OP_CALL not in code and "empty_strided_cpu(" not in code, code  # no op call, no K/V buffers
    lowered(False)
    code = compiled_code(args)
    assert code.count(OP_CALL) == 1 and code.count("empty_strided_cpu((4, 2, 4)") == 2, code


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    num_slots=st.integers(8, 40),
    batch=st.sampled_from([None, 1, 2, 3]),
    chunk=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_lowered_write_equals_eager(lowered, num_slots, batch, chunk, seed):
    lowered(True)
    check_compiled_equals_eager(make_args(num_slots, batch, chunk, seed))


def test_a_wrong_lowering_is_caught(lowered, monkeypatch):
    """Negative control: the same comparison fails when the lowering accumulates instead of writing."""
    from torch._inductor import lowering as inductor_lowering

    right = inductor_lowering.index_put_impl_

    def accumulating(self, indices, values, accumulate, **kwargs):
        return right(self, indices, values, True, **kwargs)

    monkeypatch.setattr(inductor_lowering, "index_put_impl_", accumulating)
    lowered(True)
    with pytest.raises(AssertionError, match="compiled commit differs from eager"):
        check_compiled_equals_eager(make_args(16, 2, 3, seed=1))


@pytest.mark.parametrize("bad", [-1, 16], ids=["negative", "past-the-end"])
def test_lowered_write_refuses_out_of_range_slots(lowered, bad):
    lowered(True)
    k_pool, v_pool, a, b, slots = make_args(16, None, 3, seed=2)
    slots[1] = bad
    compiled = torch.compile(commit, fullgraph=True, dynamic=False)
    with pytest.raises(RuntimeError, match="index out of bounds"):
        compiled(k_pool, v_pool, a, b, slots)


def test_metadata_is_checked_at_trace_time(lowered):
    lowered(True)
    k_pool, v_pool, a, b, slots = make_args(16, None, 3, seed=3)
    compiled = torch.compile(commit, fullgraph=True, dynamic=False)
    with pytest.raises(Exception, match=re.escape("new_k dtype torch.float64 != pool dtype torch.float32")):
        compiled(k_pool, v_pool, a.double(), b.double(), slots)


def test_debug_checks_keep_the_op_call(lowered):
    """Debug checks on at compile time: the op (and its slot checks) runs, lowering or not."""
    lowered(True)
    ar_paging.set_debug_checks(True)
    try:
        k_pool, v_pool, a, b, slots = make_args(16, None, 3, seed=4)
        assert compiled_code((k_pool, v_pool, a, b, slots)).count(OP_CALL) == 1
        slots[2] = slots[0]
        with pytest.raises(ValueError, match="duplicate slots"):
            torch.compile(commit, fullgraph=True, dynamic=False)(k_pool, v_pool, a, b, slots)
    finally:
        ar_paging.set_debug_checks(False)


class _Device:
    def __init__(self, type_: str) -> None:
        self.type = type_


class _Node:
    def __init__(self, device: _Device | None) -> None:
        self.device = device

    def get_device(self) -> _Device | None:
        return self.device


def test_only_cpu_pools_are_lowered(monkeypatch):
    monkeypatch.setattr(lowering, "_enabled", True)
    assert lowering._applies(_Node(_Device("cpu")))
    assert not lowering._applies(_Node(_Device("cuda")))  # CUDA keeps the fallback (its Python kernel)
    assert not lowering._applies(_Node(None))
    monkeypatch.setattr(lowering, "_enabled", False)
    assert not lowering._applies(_Node(_Device("cpu")))


def test_environment_variable_turns_it_off():
    code = "import ar_paging; print(ar_paging.lowering_enabled())"
    for value, expected in (("0", "False"), ("1", "True")):
        env = {**os.environ, lowering.ENV_VAR: value}
        out = warm_python.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected


def test_set_lowering_enabled_takes_a_bool():
    with pytest.raises(ValueError, match="must be a bool"):
        ar_paging.set_lowering_enabled(1)  # type: ignore[arg-type]
