"""The per-call write check: each compiled call against its own captured graph run eagerly.

Every case is a default ``Case`` (no ``reset=``), analysis-only, with a planted dropped write as its
negative control (an undeclared op whose size-0 dummy is unused: AOT autograd drops it, the compiled
region never writes). Writes through dtype views of a pool (fp8 over uint8, ``view_as_complex``, an
int32 view), ``index_fill_`` with negative indices, a pool rebound each step, a write dropped in a
denoising step whose slots the commit later rewrites (mid-rollout), an op that keeps Python state of its
own (``diverged_state``, never ``lost_write``), and what a finding says (region, call, pool, positions).
"""

from __future__ import annotations

import _writes_call_ops as ops
import pytest
import torch

from compile_checks.case import Case, run_case
from compile_checks.vocab import WriteProblem

pytestmark = pytest.mark.compile

STEPS = 3


def _findings(result, kind: WriteProblem | None = None) -> list:
    return [f for f in result.report.run_findings if kind is None or f.kind == kind]


def _view_case(fn, pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> Case:
    ops.CONTEXT["pool"] = pool
    return Case(fn.__name__, fn, pools={"pool": pool}, driver=lambda step: [step(pool, rows, k) for _ in range(STEPS)])


VIEWS = {
    # name: (correct, dropped, pool, rows, k)
    "fp8": (ops.fp8_write, ops.fp8_dropped, lambda: torch.zeros(8, 4, dtype=torch.uint8), torch.randn(2, 4)),
    "complex": (ops.complex_write, ops.complex_dropped, lambda: torch.zeros(8, 4, 2), torch.randn(2, 4, 2)),
    "int32": (ops.int32_write, ops.int32_dropped, lambda: torch.zeros(8, 4), torch.arange(8, dtype=torch.int32) + 7),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_writes_through_a_dtype_view(view: str) -> None:
    correct, dropped, make, k = VIEWS[view]
    k = k.reshape(2, 4) if view == "int32" else k
    rows = torch.tensor([1, 5])
    pool = make()
    result = run_case(_view_case(correct, pool, rows, k), analysis_only=True)
    assert _findings(result) == [] and result.passed, result.report.problems
    assert pool[[1, 5]].ne(0).any() and not pool[[0, 2, 3, 4, 6, 7]].ne(0).any()  # the compiled run wrote
    # negative control: the same write dropped by the compiler
    pool = make()
    result = run_case(_view_case(dropped, pool, rows, k), analysis_only=True)
    [f] = _findings(result)
    assert f.kind == WriteProblem.LOST_WRITE and f.rows == (1, 5), f.message
    assert "never written by the compiled run" in f.message and not result.passed
    assert not pool.ne(0).any()


def test_index_fill_with_negative_indices() -> None:
    rows = torch.tensor([-1, -3])
    pool = torch.zeros(8, 4)
    result = run_case(_view_case(ops.negative_fill, pool, rows, torch.ones(2, 4)), analysis_only=True)
    assert result.report.errors == [] and _findings(result) == [] and result.passed, result.report.problems
    assert pool[[5, 7]].eq(3).all() and pool[[0, 1, 2, 3, 4, 6]].eq(0).all()
    pool = torch.zeros(8, 4)  # negative control: dropped
    result = run_case(_view_case(ops.negative_fill_dropped, pool, rows, torch.ones(2, 4)), analysis_only=True)
    [f] = _findings(result)
    assert f.kind == WriteProblem.LOST_WRITE and f.rows == (5, 7) and not result.passed


class _Rebinding(torch.nn.Module):
    """``self.keys = self.keys.index_copy(2, pos, k)``: the cache is a new tensor after every step."""

    def __init__(self, drop: bool) -> None:
        super().__init__()
        self.keys = torch.zeros(1, 2, 16, 4)
        self.drop = drop

    def forward(self, pos: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        if self.drop:  # negative control: a write into the current cache the compiler drops
            ops.hidden_seq_write(k, pos)
        self.keys = self.keys.index_copy(2, pos, k)
        return self.keys.sum()


@pytest.mark.parametrize("drop", [False, True])
def test_a_pool_rebound_each_step_is_no_lost_write(drop: bool) -> None:
    module = _Rebinding(drop)
    k = torch.randn(1, 2, 1, 4)

    def driver(step):
        for i in range(STEPS):
            ops.CONTEXT["pool"] = module.keys
            step(torch.tensor([i]), k)

    result = run_case(Case("rebind", module, pools=lambda: {"keys": module.keys}, driver=driver), analysis_only=True)
    lost = _findings(result, WriteProblem.LOST_WRITE)
    if not drop:
        assert lost == [] and _findings(result, WriteProblem.DIVERGED_STATE) == [], result.report.run_findings
        assert module.keys[:, :, :STEPS].ne(0).all()
    else:
        assert len(lost) == 1 and lost[0].details["dim"] == 2 and not result.passed, result.report.run_findings


def _denoise(cache: torch.Tensor, pos: torch.Tensor, x: torch.Tensor, drop: bool) -> torch.Tensor:
    """One denoising step of a chunk: writes its K at the chunk's positions (the commit rewrites them)."""
    if drop:
        ops.hidden_seq_write(x, pos)
    else:
        cache.index_copy_(2, pos, x)
    return (cache * 0.5).sum() + x.sum()


@pytest.mark.parametrize("drop_at", [None, 1])
def test_a_write_dropped_mid_rollout_is_caught_at_its_call(drop_at: int | None) -> None:
    cache = torch.zeros(1, 2, 16, 4)
    ops.CONTEXT["pool"] = cache
    pos = torch.tensor([4, 5])
    xs = [torch.randn(1, 2, 2, 4) for _ in range(4)]

    def driver(step):
        for s in range(3):  # denoising steps, then the commit rewrites the same positions
            step(cache, pos, xs[s], s == drop_at)
        step(cache, pos, xs[3], False)

    result = run_case(Case("rollout", _denoise, pools={"k": cache}, driver=driver), analysis_only=True)
    if drop_at is None:
        assert _findings(result) == [] and result.passed, result.report.problems
        return
    [f] = _findings(result)
    assert f.kind == WriteProblem.LOST_WRITE and "dim 2 [4-5]" in f.message and "call 1 of 1" in f.message
    assert torch.equal(cache[:, :, 4:6], xs[3])  # the commit rewrote them: comparing at the end sees nothing


def test_a_python_position_counter_needs_no_reset() -> None:
    cache = torch.zeros(1, 2, 16, 4)
    state = {"pos": 0}
    k = torch.randn(1, 2, 2, 4)

    def step(cache: torch.Tensor, pos: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        cache.index_copy_(2, pos, k)
        return cache.sum()

    def driver(f):  # never rewinds its counter: the host loop runs once
        for _ in range(STEPS):
            f(cache, torch.arange(2) + state["pos"], k)
            state["pos"] += 2

    result = run_case(Case("counter", step, pools={"k": cache}, driver=driver), analysis_only=True)
    assert _findings(result) == [] and result.passed, result.report.problems
    assert state["pos"] == 2 * STEPS and cache[:, :, : 2 * STEPS].ne(0).all()
    # negative control: the same loop with the write dropped on its second call only
    cache.zero_()
    ops.CONTEXT["pool"] = cache
    calls = []

    def dropping(cache: torch.Tensor, pos: torch.Tensor, k: torch.Tensor, drop: bool) -> torch.Tensor:
        return _denoise(cache, pos, k, drop)

    def driver2(f):
        for i in range(STEPS):
            calls.append(i)
            f(cache, torch.arange(2) + state["pos"], k, i == 1)
            state["pos"] += 2

    result = run_case(Case("counter-dropped", dropping, pools={"k": cache}, driver=driver2), analysis_only=True)
    [f] = _findings(result)
    assert f.kind == WriteProblem.LOST_WRITE and "dim 2 [8-9]" in f.message, f.message
    assert len(f.message) < 300, f.message  # one short line


def test_a_finding_names_the_region_the_call_and_repeats() -> None:
    rows, k = torch.tensor([2]), torch.ones(1, 4, dtype=torch.int32)
    pool = torch.zeros(8, 4)
    ops.CONTEXT["pool"] = pool
    case = Case("named", ops.int32_dropped, pools={"pool": pool}, driver=lambda f: [f(pool, rows, k) for _ in range(6)])
    [f] = _findings(run_case(case, analysis_only=True))
    assert f.message.startswith("region 0 (int32_dropped (_writes_call_ops.py:"), f.message
    assert (
        "call 1 of 6: pool 'pool': dim 0 [2] of [8, 4]" in f.message and "again in 5 later call(s) (2-6)" in f.message
    )
    assert f.details["calls"] == [1, 2, 3, 4, 5, 6] and f.region == 0


def test_an_op_with_python_state_is_diverged_state_not_lost_write() -> None:
    pool, k = torch.zeros(8, 4), torch.ones(2, 4)
    ops.COUNTER["next"] = 0
    case = Case("counted", ops.counted, pools={"pool": pool}, driver=lambda f: [f(pool, None, k) for _ in range(2)])
    result = run_case(case, analysis_only=True)
    kinds = {f.kind for f in _findings(result)}
    assert kinds == {WriteProblem.DIVERGED_STATE}, result.report.run_findings
    assert "another state" in _findings(result)[0].message and not result.passed


def _noisy(cache: torch.Tensor, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    y = x + 0.1 * torch.randn_like(x)
    cache.index_copy_(2, pos, y)
    return y.sum()


def test_the_compiled_call_sees_the_rng_state_it_would_have_had(monkeypatch: pytest.MonkeyPatch) -> None:
    """The eager graph's draws are undone: the host loop's own draw after a noisy call is the same with the
    check on as with it off. Negative control: with the RNG state not put back, it differs."""
    after: list[float] = []

    def run(check_writes: bool) -> None:
        cache, x, pos = torch.zeros(1, 2, 16, 4), torch.randn(1, 2, 2, 4), torch.tensor([3, 4])

        def driver(step):
            torch.manual_seed(7)
            step(cache, pos, x)
            after.append(torch.rand(1).item())

        case = Case("rng", _noisy, pools={"k": cache}, driver=driver, check_writes=check_writes)
        result = run_case(case, analysis_only=True)
        assert _findings(result) == [] and result.passed, result.report.problems

    run(False)
    run(True)
    assert after[0] == after[1]
    monkeypatch.setattr(torch, "set_rng_state", lambda state: None)
    run(True)
    assert after[2] != after[0]


def test_a_call_holds_what_it_writes_not_the_pool() -> None:
    """The wrapper alone (no compile): the eager graph's pre-images are the call's written rows; the
    artifact dropping the write is a lost_write at that call. Negative control: a whole-pool op holds the pool."""
    from compile_checks.check.writes.calls import CallWriteCheck

    pool = torch.zeros(4096, 64)  # 1 MiB
    rows, k = torch.tensor([7, 9]), torch.ones(2, 64)
    check = CallWriteCheck(lambda: {"pool": pool})

    def graph(pool: torch.Tensor, rows: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return pool.index_copy_(0, rows, k)

    ok = check.wrap(0, graph, graph)
    dropped = check.wrap(1, graph, lambda pool, rows, k: pool)
    ok(pool, rows, k)
    assert check.peak_saved_bytes == 2 * 64 * 4 and check.findings() == []
    dropped(pool.zero_(), rows, k)
    [f] = check.findings()
    assert f.kind == WriteProblem.LOST_WRITE and f.rows == (7, 9) and "region 1, call 1 of 1" in f.message
    whole = CallWriteCheck(lambda: {"pool": pool})
    whole.wrap(0, lambda p: p.add_(1), lambda p: p.add_(1))(pool)
    assert whole.peak_saved_bytes == pool.numel() * 4
