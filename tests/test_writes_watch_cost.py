"""What the write watcher costs: per-row checksums (no pool-sized copy) around the pools a call can reach.

Negative controls: a watcher that shadows the pool (the old design) is caught by the allocation
recorder; a plain (unweighted) row sum misses a swap the checksums see; an op that writes a pool it
is not handed only on its second call is missed by the narrowed watcher (the documented limit) and
caught once registered as reaching global state, or with ``watch_all``.
"""

from __future__ import annotations

import _writes_ops as ops
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from compile_checks.check.writes import checksums, reach
from compile_checks.check.writes.checksums import changed_rows_of, row_checksums
from compile_checks.check.writes.reach import WriteReach, register_global_state_ops
from compile_checks.check.writes.watcher import WriteWatcher

SLOTS = torch.tensor([1, 3])
LATE: dict[str, torch.Tensor] = {}
CALLS = {"n": 0}


@torch.library.custom_op("w32_tests::late_write", mutates_args=())
def late_write(x: torch.Tensor) -> torch.Tensor:
    """Writes the context's pool (row 2) from its second call on; declares nothing, is handed no pool."""
    CALLS["n"] += 1
    if CALLS["n"] > 1:
        LATE["cache"][2] += 1.0
    return x.clone()


@late_write.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("w32_tests::read_pool", mutates_args=())
def read_pool(pool: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Handed a pool, writes nothing."""
    return x + pool.sum()


@read_pool.register_fake
def _(pool: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


# ---- checksums -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.uint8, torch.bool]
)
def test_one_element_change_is_seen_in_every_dtype(dtype: torch.dtype) -> None:
    pool = torch.zeros(5, 3, 4, dtype=dtype)
    before = row_checksums(pool)
    pool[3, 2, 1] = 1
    assert changed_rows_of(before, row_checksums(pool)) == [3]


def test_checksums_hash_bits_nan_and_signed_zero() -> None:
    pool = torch.full((4, 6), float("nan"))
    assert changed_rows_of(row_checksums(pool), row_checksums(pool.clone())) == [], "same NaN bits: no change"
    zeros = torch.zeros(4, 6)
    flipped = zeros.clone()
    flipped[1, 0] = -0.0
    assert changed_rows_of(row_checksums(zeros), row_checksums(flipped)) == [1], "-0.0 is another bit pattern"


def test_a_swap_within_a_row_does_not_cancel() -> None:
    """Negative control of the weighting: an unweighted sum of the bits misses a swap, the checksums do not."""
    pool = torch.arange(24, dtype=torch.float32).view(4, 6)
    swapped = pool.clone()
    swapped[2, [0, 5]] = swapped[2, [5, 0]]
    plain = pool.view(torch.int32).to(torch.int64).sum(dim=1)
    assert torch.equal(plain, swapped.view(torch.int32).to(torch.int64).sum(dim=1))
    assert changed_rows_of(row_checksums(pool), row_checksums(swapped)) == [2]


def test_tiles_and_strides_give_the_same_checksums(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = torch.randn(6, 5, 7)
    whole = row_checksums(pool)
    strided = pool.transpose(1, 2).contiguous().transpose(1, 2)  # same values, strides that cannot be flattened
    assert not strided.is_contiguous()
    monkeypatch.setattr(checksums, "TILE_ELEMENTS", 4)
    assert torch.equal(row_checksums(pool), whole)
    assert torch.equal(row_checksums(strided), whole)
    assert row_checksums(torch.tensor(2.0)).shape == (1, 2)  # 0-d state is one row
    assert row_checksums(torch.zeros(0, 3)).shape == (0, 2)


class _Allocations(TorchDispatchMode):
    """The largest new storage any op allocated (outermost: sees the watcher's own ATen ops; views and
    in-place results share an input's storage and are no allocation)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        held = {a.untyped_storage().data_ptr() for a in inputs}
        out = func(*args, **kwargs)
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in held:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


class _ShadowWatcher(WriteWatcher):
    """The old design: a pool-sized shadow copy around each opaque call."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if isinstance(func, torch._ops.OpOverload) and func.namespace == "w17_tests":
            for pool in self.pools.values():
                torch.empty_like(pool).copy_(pool)
        return super().__torch_dispatch__(func, types, args, kwargs)


@pytest.mark.parametrize("watcher", [WriteWatcher, _ShadowWatcher])
def test_watcher_allocates_nothing_pool_sized(monkeypatch: pytest.MonkeyPatch, watcher: type[WriteWatcher]) -> None:
    monkeypatch.setattr(checksums, "TILE_ELEMENTS", 1 << 12)
    cache = torch.zeros(1024, 64)  # 256 KiB; a tile's int64 temporaries are 32 KiB
    ops.CONTEXT["cache"] = cache
    with _Allocations() as seen, watcher({"cache": cache}) as w:
        ops.hidden_kv_update(torch.ones(2, 64), SLOTS)
    assert [(x.op, x.rows) for x in w.writes] == [("w17_tests::hidden_kv_update", (1, 3))]
    pool_bytes = cache.numel() * cache.element_size()
    if watcher is WriteWatcher:
        assert seen.largest <= pool_bytes // 4, seen.largest
    else:  # the recorder does see a shadow copy
        assert seen.largest >= pool_bytes


# ---- narrowing ----------------------------------------------------------------------------------


def _pools(n: int = 4) -> dict[str, torch.Tensor]:
    return {f"layer{i}.k": torch.zeros(8, 4) for i in range(n)}


def test_watch_narrows_to_the_pools_a_call_is_handed() -> None:
    pools = _pools()
    x = torch.ones(4)
    with WriteWatcher(pools) as w:
        for _ in range(5):
            read_pool(pools["layer1.k"], x)
    # the first call sweeps every pool; the other four watch only the pool the call was handed
    assert w.watched == {"layer0.k": 1, "layer1.k": 5, "layer2.k": 1, "layer3.k": 1}
    assert w.writes == []


def test_an_op_seen_writing_global_state_is_watched_in_full() -> None:
    pools = _pools()
    ops.CONTEXT["cache"] = pools["layer2.k"]
    with WriteWatcher(pools) as w:
        ops.hidden_kv_update(torch.ones(2, 4), SLOTS)
        ops.hidden_kv_update(torch.full((1, 4), 2.0), torch.tensor([6]))
    assert [(x.op, x.pool, x.rows) for x in w.writes] == [
        ("w17_tests::hidden_kv_update", "layer2.k", (1, 3)),
        ("w17_tests::hidden_kv_update", "layer2.k", (6,)),
    ]
    assert w.reach.learned == {"w17_tests::hidden_kv_update"}
    assert set(w.watched.values()) == {2}


def _late_writes(reach_policy: WriteReach) -> list[tuple[str, tuple[int, ...]]]:
    pools = _pools()
    LATE["cache"], CALLS["n"] = pools["layer3.k"], 0
    with WriteWatcher(pools, reach=reach_policy) as w:
        late_write(torch.ones(3))
        late_write(torch.ones(3))
    return [(x.pool, x.rows) for x in w.writes]


def test_a_late_global_write_needs_the_registry_or_watch_all(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _late_writes(WriteReach()) == [], "the narrowed watch's documented limit: it was swept on a silent call"
    assert _late_writes(WriteReach(["w32_tests::late_write"])) == [("layer3.k", (2,))]
    assert _late_writes(WriteReach(watch_all=True)) == [("layer3.k", (2,))]
    monkeypatch.setattr(reach, "_GLOBAL_STATE_OPS", set(reach.global_state_ops()))
    register_global_state_ops("w32_tests::*")
    assert _late_writes(WriteReach()) == [("layer3.k", (2,))]


def test_vllm_ops_reach_global_state_and_names_are_checked() -> None:
    assert reach.reaches_global_state("vllm::unified_kv_cache_update")
    assert reach.reaches_global_state("vllm::unified_attention_with_output")
    assert not reach.reaches_global_state("ar_paging::paged_write")
    with pytest.raises(ValueError, match="namespace::name"):
        register_global_state_ops("late_write")


@pytest.mark.compile
def test_compiled_regions_share_one_narrowing_policy() -> None:
    """In a check session the compiled graph's opaque calls are watched narrowed: the first call of
    ``read_pool`` sweeps all pools, the later ones (later runs of the region too) only the pool handed."""
    from compile_checks.api import CloneCheck

    pools = _pools()

    def step(pool: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return read_pool(pool, read_pool(pool, x))

    check = CloneCheck(pools=pools, analysis_only=True)
    with check:
        compiled = check.compile(step)
        for _ in range(2):
            compiled(pools["layer1.k"], torch.ones(4))
    assert check.probe.write_watch.watched == {"layer0.k": 1, "layer1.k": 4, "layer2.k": 1, "layer3.k": 1}
    assert check.report.run_findings == []
