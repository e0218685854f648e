"""The lost-write check's eager run (``eager_reference``, one per compiled call): restore, RNG, compare, cost.

Unit tests of the undo log (no compile): every tensor the eager run writes is put back (a 0-dim counter,
an index tensor in a dict, a module buffer), tensors made during the run are not saved, the pre-images
hold only the written elements, an opaque op's registered footprint replaces saving it whole, and a
write no dispatch mode can see fails loudly (never silently). Cases (analysis-only): a StaticCache-like
``[B, H, L, D]`` cache written along L with a tensor counter passes, its dropped twin is a ``lost_write``
named along dim 2; a Python-int position counter needs no ``reset`` (the host loop runs once); sampled
noise passes while a dropped noisy write is caught; a bf16 pool holding one large value does not hide a
lost row; a compile hook returning a block list is driven once and leaves the same dynamo graphs as
without the check.
"""

from __future__ import annotations

import _writes_ref_ops as ops
import pytest
import torch

from compile_checks.case import Case, run_case
from compile_checks.check.writes import Footprint, eager_reference, register_write_footprint
from compile_checks.check.writes.footprint import _REGISTRY
from compile_checks.vocab import WriteProblem

B, H, L, D = 1, 2, 16, 4


def _kinds(result) -> list[str]:
    return [str(f.kind) for f in result.report.run_findings]


# --- the undo log ---------------------------------------------------------------------------------


def test_every_written_tensor_is_restored_not_only_the_pools() -> None:
    cache, length = torch.zeros(B, H, L, D), torch.tensor(0)
    state = {"slots": torch.tensor([5, 6])}
    module = torch.nn.BatchNorm1d(4)

    def run() -> None:
        ops.seq_write(cache, length, torch.ones(B, H, 3, D))
        state["slots"].add_(10)  # an index tensor kept in a dict
        module.train()(torch.randn(8, 4))  # running stats: module buffers written in place
        fresh = torch.zeros(4)
        fresh.fill_(1.0)  # made during the run: nothing to save

    ref = eager_reference({"k": cache}, run)
    assert int(length) == 0 and not cache.ne(0).any()
    assert state["slots"].tolist() == [5, 6]
    assert module.running_mean.eq(0).all() and module.running_var.eq(1).all() and int(module.num_batches_tracked) == 0
    assert ref.errors == [] and ref.notes == []
    written = ref.pools["k"]
    assert written.offsets.numel() == B * H * 3 * D  # only what was written
    # negative control: the same run without the reference leaves the counter advanced
    run()
    assert int(length) == 3 and state["slots"].tolist() == [15, 16]


def test_pre_images_cost_the_written_elements_not_the_pool() -> None:
    pool = torch.zeros(4096, 64)  # 1 MiB
    rows = torch.tensor([7, 9])
    ref = eager_reference({"pool": pool}, lambda: pool.index_copy_(0, rows, torch.ones(2, 64)))
    assert ref.saved_bytes == 2 * 64 * 4
    assert not pool.ne(0).any()
    # negative control: a whole-pool in-place op saves (and restores) the whole pool
    ref = eager_reference({"pool": pool}, lambda: pool.add_(1))
    assert ref.saved_bytes == pool.numel() * 4 and not pool.ne(0).any()


def test_opaque_op_without_a_footprint_is_saved_whole_and_said() -> None:
    pool, rows = torch.zeros(64, 4), torch.tensor([3])
    ref = eager_reference({"pool": pool}, lambda: torch.ops.w32_tests.unseen_write(pool, rows, torch.ones(1, 4)))
    assert not pool.ne(0).any() and ref.errors == []
    assert ref.saved_bytes == 64 * 4 * 4
    assert any("w32_tests::unseen_write" in n and "saved them whole" in n for n in ref.notes), ref.notes
    register_write_footprint("w32_tests::unseen_write", lambda c: [Footprint.along(c["pool"], 0, c["rows"])])
    try:
        ref = eager_reference({"pool": pool}, lambda: torch.ops.w32_tests.unseen_write(pool, rows, torch.ones(1, 4)))
    finally:
        del _REGISTRY["w32_tests::unseen_write"]
    assert ref.saved_bytes == 4 * 4 and ref.notes == [] and not pool.ne(0).any()
    assert ref.pools["pool"].offsets.tolist() == [12, 13, 14, 15]


def test_attention_without_dropout_does_not_make_later_writes_random() -> None:
    # SDPA's CPU kernel is tagged nondeterministic_seeded (for its dropout): with dropout_p=0 it draws nothing,
    # so a write of its output is compared by value (a lost write where the pool was written before is seen)
    cache, q = torch.zeros(8, 4), torch.randn(1, 1, 2, 4)

    def attend_and_write(p: float) -> None:
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=p)
        cache[2:4].copy_(out[0, 0])

    assert not eager_reference({"cache": cache}, lambda: attend_and_write(0.0)).pools["cache"].random.any()
    # negative control: with dropout the written values are random (compared by whether they were written)
    assert eager_reference({"cache": cache}, lambda: attend_and_write(0.5)).pools["cache"].random.all()
    assert not cache.ne(0).any()


def test_a_write_no_mode_can_see_fails_loudly() -> None:
    cache = torch.zeros(8, 4)
    ops.CONTEXT["cache"] = cache
    ref = eager_reference(
        {"cache": cache}, lambda: torch.ops.w32_tests.sneaky_write(torch.tensor([2]), torch.ones(1, 4))
    )
    [error] = ref.errors
    assert "could not restore pool 'cache' (dim 0 [2] of [8, 4]" in error and "register its write footprint" in error
    # the clean twin: the same write seen by the log is restored, no error
    cache.zero_()
    ref = eager_reference({"cache": cache}, lambda: cache.index_copy_(0, torch.tensor([2]), torch.ones(1, 4)))
    assert ref.errors == [] and not cache.ne(0).any()


# --- cases -----------------------------------------------------------------------------------------


def _static_cache_case(fn, name: str, **kw) -> tuple[Case, torch.Tensor, torch.Tensor]:
    cache, length = torch.zeros(B, H, L, D), torch.tensor(4)
    ops.CONTEXT["cache"] = cache
    k = torch.randn(B, H, 2, D)

    def driver(step):
        for _ in range(2):
            if fn is ops.seq_write:
                step(cache, length, k)
            else:
                pos = torch.arange(2) + length
                step(cache, pos, k)
                length.add_(2)

    return Case(name, fn, pools={"layer0.k": cache}, driver=driver, **kw), cache, length


@pytest.mark.compile
def test_static_cache_with_a_tensor_counter_passes() -> None:
    case, cache, length = _static_cache_case(ops.seq_write, "static")
    result = run_case(case, analysis_only=True)
    assert result.report.run_findings == [] and result.passed, result.report.problems
    assert int(length) == 8 and cache[:, :, 4:8].ne(0).all() and not cache[:, :, 8:].ne(0).any()


@pytest.mark.compile
def test_a_dropped_write_along_L_is_named_along_dim_2() -> None:
    case, cache, _ = _static_cache_case(ops.dropped_seq_write, "dropped")
    result = run_case(case, analysis_only=True)
    [f] = result.report.run_findings
    assert f.kind == WriteProblem.LOST_WRITE and f.op == "w32_tests::hidden_seq_write"
    # per call: call 1 wrote positions 4-5 (call 2, positions 6-7, lost the same way is "again")
    assert f.details["dim"] == 2 and f.rows == (4, 5) and f.details["calls"] == [1, 2]
    assert "call 1 of 2: pool 'layer0.k': dim 2 [4-5] of [1, 2, 16, 4]" in f.message, f.message
    assert "row" not in f.message.split("(")[0]
    assert f.nbytes == B * H * 2 * D * 4 and not result.passed
    assert not cache.ne(0).any()


def _python_counter_case(**kw) -> tuple[Case, torch.Tensor]:
    cache = torch.zeros(B, H, L, D)
    k = torch.randn(B, H, 2, D)
    state = {"pos": 0}

    def driver(step):
        for _ in range(2):
            step(cache, torch.arange(2) + state["pos"], k)
            state["pos"] += 2

    return Case("py-counter", ops.seq_write_at, pools={"layer0.k": cache}, driver=driver, **kw), state


@pytest.mark.compile
def test_a_python_counter_needs_no_reset() -> None:
    case, state = _python_counter_case()
    result = run_case(case, analysis_only=True)
    assert result.report.run_findings == [] and result.passed, result.report.problems
    assert state["pos"] == 4  # the host loop ran once
    # negative control: the same loop writing through the dropped op is caught at its first call
    cache = next(iter(case.pools.values()))  # type: ignore[union-attr]
    ops.CONTEXT["cache"] = cache
    result = run_case(case.replace(fn=ops.dropped_seq_write), analysis_only=True)
    assert _kinds(result) == ["lost_write"] and "dim 2 [4-5]" in result.report.run_findings[0].message


@pytest.mark.compile
def test_with_reset_a_python_counter_passes() -> None:
    case, state = _python_counter_case()
    case = case.replace(reset=lambda: state.update(pos=0))
    result = run_case(case, analysis_only=True)
    assert result.report.run_findings == [] and result.passed, result.report.problems
    assert state["pos"] == 4


@pytest.mark.compile
@pytest.mark.parametrize(("fn", "kinds"), [(ops.noisy_write, []), (ops.noisy_write_dropped, ["lost_write"])])
def test_noise_passes_and_a_dropped_noisy_write_is_caught(fn, kinds: list[str]) -> None:
    cache = torch.zeros(B, H, L, D)
    ops.CONTEXT["cache"] = cache
    x, pos = torch.randn(B, H, 2, D), torch.tensor([3, 4])
    case = Case(fn.__name__, fn, pools={"cache": cache}, driver=lambda step: step(cache, pos, x))
    result = run_case(case, analysis_only=True)
    assert _kinds(result) == kinds, result.report.run_findings
    assert result.passed is (not kinds)
    if kinds:
        assert result.report.run_findings[0].rows == (3, 4)


@pytest.mark.compile
def test_one_large_value_does_not_hide_a_lost_bf16_row() -> None:
    cache = torch.zeros(B, H, L, D, dtype=torch.bfloat16)
    cache[0, 0, 15, 0] = 32.0  # the old global tolerance: 5e-2 * 32 = 1.6 hid every lost row of ones
    ops.CONTEXT["cache"] = cache
    k, pos = torch.ones(B, H, 2, D, dtype=torch.bfloat16), torch.tensor([1, 2])
    case = Case("bf16", ops.dropped_seq_write, pools={"cache": cache}, driver=lambda step: step(cache, pos, k))
    result = run_case(case, analysis_only=True)
    [f] = result.report.run_findings
    assert f.kind == WriteProblem.LOST_WRITE and f.rows == (1, 2) and f.details["unwritten_elements"] == 16
    # the clean twin: the same write in the graph passes
    case = Case("bf16-ok", ops.seq_write_at, pools={"cache": cache}, driver=lambda step: step(cache, pos, k))
    assert run_case(case, analysis_only=True).report.run_findings == []


class _Block(torch.nn.Module):
    def __init__(self, cache: torch.Tensor, index: int) -> None:
        super().__init__()
        self.cache, self.index = cache, index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache[self.index].copy_(x)
        return x * 2


def _blocks_case(check_writes: bool) -> tuple[Case, list[str]]:
    cache = torch.zeros(2, 4)
    blocks = [_Block(cache, i) for i in range(2)]
    got: list[str] = []

    def compile_blocks(backend):
        for b in blocks:
            b.forward = torch.compile(b.forward, backend=backend, fullgraph=True)
        return blocks

    def driver(compiled):
        got.append(type(compiled).__name__)
        x = torch.ones(4)
        for b in compiled:
            x = b(x)
        return x

    case = Case(
        "blocks", blocks[0], pools={"cache": cache}, driver=driver, compile=compile_blocks, meta={"blocks": blocks}
    )
    return case.replace(check_writes=check_writes), got


def _blocks_of(case: Case) -> list[_Block]:
    return list(case.meta["blocks"])


@pytest.mark.compile
def test_a_hook_returning_a_block_list_is_what_the_eager_reference_runs() -> None:
    case, got = _blocks_case(check_writes=True)
    result = run_case(case, analysis_only=True)
    assert got == ["list"], "the driver runs once, with the hook's block list"
    assert result.passed and result.report.run_findings == [], result.report.problems
    # no dynamo state left by the eager pass: the same graphs and recompiles as without it
    plain, got = _blocks_case(check_writes=False)
    without = run_case(plain, analysis_only=True)
    assert got == ["list"]
    assert {k: v["graphs"] for k, v in result.report.recompiles.items()} == {
        k: v["graphs"] for k, v in without.report.recompiles.items()
    }
    assert sum(v["graphs"] for v in result.report.recompiles.values()) >= 1


def test_per_dim_checksums_locate_a_change_and_do_not_depend_on_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    from compile_checks.check.writes import positions

    t = torch.randn(2, 30, 8, 4)
    whole = positions.dim_checksums(t)
    monkeypatch.setattr(positions, "_CHUNK", 16)  # chunks of dim 0, then one dim down
    assert all(torch.equal(a, b) for a, b in zip(whole, positions.dim_checksums(t), strict=True))
    u = t.clone()
    u[1, 17, 3, 2] += 1
    assert positions.changed_indices(whole, positions.dim_checksums(u)) == [[1], [17], [3], [2]]
    # negative control: an unchanged tensor shows no index
    assert positions.changed_indices(whole, positions.dim_checksums(t.clone())) == [[], [], [], []]
    for dtype in (torch.int64, torch.float64, torch.bool, torch.bfloat16):  # 8-byte elements: never hashed in place
        x = torch.arange(6).reshape(2, 3).to(dtype)
        kept = x.clone()
        positions.dim_checksums(x)
        assert torch.equal(x, kept), dtype


# --- the compare, without a compiler: the "compiled run" is whatever the test does after the reference ---


def test_positions_in_a_paged_layout_and_a_0_dim_counter() -> None:
    blocks, counter = torch.zeros(8, 16, 2, 4), torch.tensor(0)
    pools = {"k": blocks, "len": counter}

    def run() -> None:
        blocks[3].fill_(1.0)  # a whole block
        blocks[5, 4:8].fill_(1.0)  # slots 4-7 of block 5
        counter.add_(20)

    ref = eager_reference(pools, run)
    found = {f.pool: f for f in ref.compare(pools)}  # nothing written since: both are lost
    k, n = found["k"], found["len"]
    assert "dim 0 [3, 5], dim 1 [0-15] of [8, 16, 2, 4]" not in k.message  # dim 1 spans: not named
    assert "dim 0 [3, 5] of [8, 16, 2, 4]" in k.message and k.rows == (3, 5)
    assert k.details["positions"]["1"] == list(range(16)) and k.details["unwritten_elements"] == 16 * 8 + 4 * 8
    assert "the 0-dim tensor" in n.message and n.kind == WriteProblem.LOST_WRITE
    # the clean twin: the same writes again pass
    run()
    assert ref.compare(pools) == []


def test_exact_for_unwritten_and_per_row_tolerance_for_values() -> None:
    pool = torch.zeros(8, 4, dtype=torch.bfloat16)
    pool[7, 0] = 32.0
    rows = torch.tensor([1, 2])
    small = torch.full((2, 4), 1e-3, dtype=torch.bfloat16)
    ref = eager_reference({"p": pool}, lambda: pool.index_copy_(0, rows, small))
    [f] = ref.compare({"p": pool})  # tiny values, never written: still lost (bit-exact)
    assert f.rows == (1, 2) and f.details["unwritten_elements"] == 8
    pool.index_copy_(0, rows, small * 1.01)  # within bf16's per-row tolerance
    assert ref.compare({"p": pool}) == []
    pool[2, 1] = 0.5  # beyond it, in row 2 only
    [f] = ref.compare({"p": pool})
    assert f.rows == (2,) and f.details["different_elements"] == 1 and f.kind == WriteProblem.LOST_WRITE


def test_written_elsewhere_is_diverged_state_not_lost_write() -> None:
    cache = torch.zeros(1, 2, 16, 4)
    ref = eager_reference({"k": cache}, lambda: cache[:, :, 0:4].fill_(1.0))
    cache[:, :, 4:8].fill_(1.0)  # the compiled run started 4 positions later
    [f] = ref.compare({"k": cache})
    assert f.kind == WriteProblem.DIVERGED_STATE and "another state" in f.message
    assert "dim 2 [0-3]" in f.message and "dim 2 [4-7]" in f.message
    # negative control: written at the same place plus elsewhere is a lost write (extra), not diverged
    cache[:, :, 0:4].fill_(1.0)
    [f] = ref.compare({"k": cache})
    assert (
        f.kind == WriteProblem.LOST_WRITE
        and "the compiled run also wrote dim 2 [4-7]" in f.message
        and f.rows == (4, 5, 6, 7)
    )


def test_reset_must_be_callable() -> None:
    with pytest.raises(ValueError, match="reset must be callable"):
        Case("r", lambda: None, reset=1)  # type: ignore[arg-type]


def test_a_write_that_cannot_be_undone_is_an_error() -> None:
    buf = torch.zeros(4)
    ref = eager_reference({"buf": buf}, lambda: buf.resize_(8).fill_(1.0))
    assert any("could not undo a write of aten::" in e for e in ref.errors), ref.errors
    # the clean twin: no resize, nothing to report
    buf = torch.zeros(4)
    assert eager_reference({"buf": buf}, lambda: buf.fill_(1.0)).errors == []
