"""Chunk-window eviction: the skip arithmetic, and eviction through vLLM's real BlockPool + manager.

Every expectation comes from ``chunk_roles`` below, an independent simulation of
which chunks are resident (sink = first ``sink_chunks`` chunks, window = last
``window_chunks`` *completed* chunks, gap = the rest; reset strategy: every
completed chunk after the sink is gap). The reference spec's versions of the
manager, the spec validation and the admission cap are reproduced here and must
fail the same checks.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import sys
import textwrap

import _warm_python as warm_python
import pytest
import torch
from _checks import check_rejects
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.single_type_kv_cache_manager import (
    FullAttentionManager,
    SlidingWindowManager,
    get_manager_for_kv_cache_spec,
)
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry, register_kv_cache_spec

import ar_paging.eviction_table as et
from ar_paging import ChunkWindowManager, ChunkWindowSpec, chunk_window_skipped_tokens
from ar_paging.chunk_window import register_chunk_window_spec

RID = et.REQUEST_ID
NUM_CHUNKS = 10


# ── independent reference ───────────────────────────────────────────────────


def completed_chunks(num_tokens: int, chunk_size: int) -> int:
    k = 0
    while (k + 1) * chunk_size <= num_tokens:
        k += 1
    return k


def chunk_roles(num_completed: int, window_chunks: int, sink_chunks: int, reset: bool) -> dict[int, str]:
    """Role of each completed chunk: 'S' sink, 'W' window, '.' gap (evicted)."""
    completed = list(range(num_completed))
    sink = completed[:sink_chunks]
    rest = completed[sink_chunks:]
    window = [] if reset else rest[len(rest) - window_chunks :] if len(rest) > window_chunks else rest
    roles = {}
    for c in completed:
        roles[c] = "S" if c in sink else "W" if c in window else "."
    return roles


# ── 1. the skip arithmetic ──────────────────────────────────────────────────


@settings(deadline=None, max_examples=200)
@given(
    num_tokens=st.integers(0, 400),
    chunk_size=st.integers(1, 16),
    window_chunks=st.integers(1, 5),
    sink_chunks=st.integers(0, 3),
    reset=st.booleans(),
)
def test_skipped_tokens_match_chunk_simulation(num_tokens, chunk_size, window_chunks, sink_chunks, reset):
    roles = chunk_roles(completed_chunks(num_tokens, chunk_size), window_chunks, sink_chunks, reset)
    gap = [c for c, r in roles.items() if r == "."]
    got = chunk_window_skipped_tokens(
        num_tokens,
        chunk_size=chunk_size,
        sliding_window=window_chunks * chunk_size,
        sink_chunks=sink_chunks,
        reset_at_boundary=reset,
    )
    assert got == len(gap) * chunk_size
    # The gap is contiguous and starts right after the sink: [sink, sink + skipped).
    assert gap == list(range(sink_chunks, sink_chunks + len(gap)))


def test_skipped_tokens_rejects_negative():
    with pytest.raises(ValueError, match="num_computed_tokens"):
        chunk_window_skipped_tokens(-1, chunk_size=4, sliding_window=8, sink_chunks=0, reset_at_boundary=False)


# ── 2. eviction through vLLM's BlockPool + manager ─────────────────────────


def worker_num_null(spec, first_pos: int) -> int:
    """Leading entries vLLM's GPU worker nulls before a forward pass.

    Python transcription of ``_gather_block_tables_kernel`` in
    ``vllm/v1/worker/gpu/block_table.py``: ``reach`` is ``num_retained_tokens``
    for ``SlidingWindowSpec`` groups, ``0`` disables the mask.
    """
    reach = spec.num_retained_tokens if isinstance(spec, SlidingWindowSpec) else 0
    return max(first_pos - reach, 0) // spec.block_size if reach > 0 else 0


def check_invariants(spec, num_chunks: int = NUM_CHUNKS, manager_class=None, admission_cap=None) -> None:
    """Drive one request chunk by chunk through the real pool/manager and check every step."""
    bs, cs = spec.block_size, spec.chunk_size
    num_gpu_blocks = -(-num_chunks * cs // bs) + 2
    manager, pool = et.make_manager(spec, num_chunks, num_gpu_blocks=num_gpu_blocks, manager_class=manager_class)
    if admission_cap is not None:
        manager.max_admission_blocks_per_request = admission_cap
    null = pool.null_block
    start_free = pool.get_num_free_blocks()
    assert start_free == num_gpu_blocks - 1, "the pool starts with every block but the null block free"
    prev_ids: tuple[int, ...] = ()
    for step in et.step_chunks(manager, num_chunks, request_id=RID):
        c = step.chunk
        blocks = manager.req_to_blocks[RID]
        num_tokens = (c + 1) * cs
        assert len(blocks) == -(-num_tokens // bs), f"chunk {c}: table length"
        roles = chunk_roles(c, spec.window_chunks, spec.sink_chunks, spec.reset_at_boundary)
        roles[c] = "C"  # the in-flight chunk
        for pos in range(num_tokens):
            block = blocks[pos // bs]
            resident = roles[pos // cs] != "."
            assert (block is not null) == resident, (
                f"token residency: chunk {c} in flight, position {pos} (chunk {pos // cs}, role "
                f"{roles[pos // cs]!r}) is on block {block.block_id} (null={block is null})"
            )
        masked = worker_num_null(spec, c * cs)
        kept = [i for i in range(masked) if blocks[i] is not null]
        assert not kept, f"worker mask: chunk {c} in flight, the worker would null resident entries {kept}"
        for i, block in enumerate(blocks):
            assert block.is_null == (block is null), f"chunk {c}: entry {i} is a null block other than pool.null_block"
        held = [b for b in blocks if b is not null]
        held_ids = [b.block_id for b in held]
        assert len(set(held_ids)) == len(held_ids), f"chunk {c}: a real block appears twice: {held_ids}"
        assert all(b.ref_cnt == 1 for b in held), f"chunk {c}: held blocks must have ref_cnt 1"
        for i, old in enumerate(prev_ids):
            if blocks[i] is not null:
                assert blocks[i].block_id == old, f"chunk {c}: resident entry {i} moved {old} -> {blocks[i].block_id}"
        assert pool.get_num_free_blocks() + len(held) == num_gpu_blocks - 1, (
            f"chunk {c}: free {pool.get_num_free_blocks()} + held {len(held)} != {num_gpu_blocks - 1}"
        )
        assert step.predicted_new_blocks == len(step.new_block_ids), "vLLM's prediction != allocation"
        assert len(held) <= manager.max_admission_blocks_per_request, (
            f"admission cap: chunk {c} holds {len(held)} blocks > cap {manager.max_admission_blocks_per_request}"
        )
        prev_ids = step.block_ids
    manager.free(RID)
    assert RID not in manager.req_to_blocks
    assert pool.get_num_free_blocks() == start_free, "leak: free() did not return every block"


GRID = list(
    itertools.product(
        [2, 4, 16],  # block_size
        [1, 2, 3, 4],  # blocks per chunk
        [1, 2, 3, 4],  # window_chunks
        [0, 1, 2],  # sink_chunks
        [False, True],  # reset_at_boundary
    )
)


@pytest.mark.parametrize("block_size,blocks_per_chunk,window_chunks,sink_chunks,reset", GRID)
def test_eviction_invariants_real_manager(block_size, blocks_per_chunk, window_chunks, sink_chunks, reset):
    spec = et.make_spec(block_size, block_size * blocks_per_chunk, window_chunks, sink_chunks, reset)
    check_invariants(spec)


def test_manager_resolution_through_the_registry():
    spec = et.make_spec(4, 8, 2, 1, False)
    assert KVCacheSpecRegistry.get_manager_class(spec) is ChunkWindowManager
    assert KVCacheSpecRegistry.get_uniform_type_base_spec(spec) is ChunkWindowSpec
    pool = BlockPool(num_gpu_blocks=8, enable_caching=False, hash_block_size=4)
    manager = get_manager_for_kv_cache_spec(
        spec,
        max_in_flight_tokens=8,
        max_model_len=64,
        block_pool=pool,
        enable_caching=False,
        kv_cache_group_id=0,
        scheduler_block_size=4,
    )
    assert type(manager) is ChunkWindowManager
    assert manager.max_admission_blocks_per_request == spec.max_admission_blocks_per_request(8, 64)
    check_builtins_resolve()
    KVCacheSpecRegistry.check_kv_cache_spec_registry({"chunk_layer": spec, "full_layer": full_spec()})


def full_spec(block_size: int = 4) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float16)


def check_builtins_resolve() -> None:
    """vLLM's built-in specs still resolve to their managers."""
    full = KVCacheSpecRegistry.get_manager_class(full_spec())
    assert full is FullAttentionManager, f"FullAttentionSpec resolves to {full}"
    sliding = SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8, dtype=torch.float16, sliding_window=8)
    assert KVCacheSpecRegistry.get_manager_class(sliding) is SlidingWindowManager


@pytest.fixture
def empty_registry():
    """An empty spec registry, as in a fresh process before anything touched it; restored after."""
    from vllm.v1 import kv_cache_spec_registry as reg

    saved = dict(reg._REGISTRY_KVCACHESPEC_LIST)
    reg._REGISTRY_KVCACHESPEC_LIST.clear()
    try:
        yield
    finally:
        reg._REGISTRY_KVCACHESPEC_LIST.clear()
        reg._REGISTRY_KVCACHESPEC_LIST.update(saved)


def test_registration_order_pitfall_spec_way(empty_registry):
    """The spec's plain decorator on an empty registry hides every built-in spec."""
    register_kv_cache_spec(manager_class=ChunkWindowManager, uniform_type_base_spec=None)(ChunkWindowSpec)
    with pytest.raises(AssertionError, match="FullAttentionSpec resolves to None"):
        check_builtins_resolve()


def test_registration_order_pitfall_ours(empty_registry):
    register_chunk_window_spec()
    check_builtins_resolve()
    assert KVCacheSpecRegistry.get_manager_class(et.make_spec(4, 8, 1, 0, False)) is ChunkWindowManager
    register_chunk_window_spec()  # idempotent
    check_builtins_resolve()


def test_registration_in_a_fresh_process():
    """``import ar_paging`` as the first thing a process does keeps the built-ins."""
    code = textwrap.dedent(
        """
        import ar_paging, torch
        from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry as R
        from vllm.v1.kv_cache_interface import FullAttentionSpec
        full = FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8, dtype=torch.float16)
        spec = ar_paging.ChunkWindowSpec(block_size=4, num_kv_heads=1, head_size=8, dtype=torch.float16,
                                         sliding_window=8, chunk_size=8, window_chunks=1)
        print(R.get_manager_class(full).__name__, R.get_manager_class(spec).__name__)
        """
    )
    out = warm_python.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["FullAttentionManager", "ChunkWindowManager"]


# ── 3. the spec's defects ───────────────────────────────────────────────────


class SpecChunkWindowManager(ChunkWindowManager):
    """The reference spec's ``remove_skipped_blocks``: ``sink_chunks`` used as a block count."""

    def remove_skipped_blocks(self, request_id, total_computed_tokens, num_prompt_tokens=None):
        del num_prompt_tokens
        num_skipped_tokens = self.get_num_skipped_tokens(total_computed_tokens)
        if num_skipped_tokens <= 0:
            return
        sink_blocks = self.kv_cache_spec.sink_chunks
        num_skipped_blocks = num_skipped_tokens // self.block_size
        self._remove_blocks_in_range(request_id, sink_blocks, sink_blocks + num_skipped_blocks)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpecChunkWindowSpec(SlidingWindowSpec):
    """The reference spec's ``ChunkWindowSpec`` validation (unregistered; used directly)."""

    chunk_size: int
    window_chunks: int
    sink_chunks: int = 0
    reset_at_boundary: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.sliding_window != self.window_chunks * self.chunk_size:
            raise ValueError("ChunkWindowSpec.sliding_window must equal window_chunks * chunk_size")


SINK_BUG_CASES = [(4, 8, 2, 1, False), (2, 8, 1, 2, False), (16, 32, 3, 1, True), (4, 12, 1, 2, True)]


@pytest.mark.parametrize("block_size,chunk_size,window_chunks,sink_chunks,reset", SINK_BUG_CASES)
def test_spec_manager_frees_the_sink(block_size, chunk_size, window_chunks, sink_chunks, reset):
    spec = et.make_spec(block_size, chunk_size, window_chunks, sink_chunks, reset)
    check_invariants(spec)
    with pytest.raises(AssertionError, match="token residency"):
        check_invariants(spec, manager_class=SpecChunkWindowManager)


def test_spec_manager_is_right_only_when_a_chunk_is_one_block():
    """The sink bug is a unit confusion: with chunk_size == block_size it is invisible."""
    check_invariants(et.make_spec(4, 4, 2, 2, False), manager_class=SpecChunkWindowManager)


def test_spec_admission_cap_forgets_the_sink():
    """vLLM's plain sliding-window cap: a request with a 2-block sink outgrows it."""
    spec = et.make_spec(4, 8, 2, 1, False)
    plain_cap = SlidingWindowSpec.max_admission_blocks_per_request(spec, 8, NUM_CHUNKS * 8)
    assert plain_cap < spec.max_admission_blocks_per_request(8, NUM_CHUNKS * 8)
    check_invariants(spec)
    with pytest.raises(AssertionError, match="admission cap"):
        check_invariants(spec, admission_cap=plain_cap)


class InheritedRetentionSpec(ChunkWindowSpec):
    """Ours, but with the ``num_retained_tokens`` the spec inherited from ``SlidingWindowSpec``."""

    @property
    def num_retained_tokens(self) -> int:
        return SlidingWindowSpec.num_retained_tokens.fget(self)


@pytest.mark.parametrize(
    "block_size,chunk_size,window_chunks,sink_chunks,reset",
    [(4, 8, 2, 1, False), (16, 16, 1, 2, True), (1, 1, 2, 0, False), (1, 3, 1, 0, False)],
)
def test_inherited_retention_lets_the_worker_null_resident_blocks(
    block_size, chunk_size, window_chunks, sink_chunks, reset
):
    kwargs = dict(
        block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float16,
        sliding_window=window_chunks * chunk_size, chunk_size=chunk_size,
        window_chunks=window_chunks, sink_chunks=sink_chunks, reset_at_boundary=reset,
    )  # fmt: skip
    check_invariants(ChunkWindowSpec(**kwargs))
    with pytest.raises(AssertionError, match="worker mask"):
        check_invariants(InheritedRetentionSpec(**kwargs), manager_class=ChunkWindowManager)


def test_retention_masks_exactly_the_gap_without_a_sink():
    """Sliding, no sink: the worker mask covers every evicted block, not just some."""
    spec = et.make_spec(4, 8, 2, 0, False)
    manager, _pool = et.make_manager(spec, NUM_CHUNKS)
    for step in et.step_chunks(manager, NUM_CHUNKS):
        num_null_entries = sum(step.is_null)
        assert worker_num_null(spec, step.num_computed_tokens) == num_null_entries
    manager.free(RID)


def spec_kwargs(block_size=4, chunk_size=8, window_chunks=2, sink_chunks=1, sliding_window=None):
    return dict(
        block_size=block_size,
        num_kv_heads=1,
        head_size=8,
        dtype=torch.float16,
        sliding_window=window_chunks * chunk_size if sliding_window is None else sliding_window,
        chunk_size=chunk_size,
        window_chunks=window_chunks,
        sink_chunks=sink_chunks,
    )


BAD_SPECS = {
    "chunk_not_block_multiple": (dict(block_size=4, chunk_size=6), "chunk_size"),
    "chunk_smaller_than_block": (dict(block_size=8, chunk_size=4), "chunk_size"),
    "window_zero": (dict(window_chunks=0), "window_chunks"),
    "window_negative": (dict(window_chunks=-1), "window_chunks"),
    "sink_negative": (dict(sink_chunks=-1), "sink_chunks"),
    "chunk_zero": (dict(chunk_size=0), "chunk_size"),
    "chunk_negative": (dict(chunk_size=-4), "chunk_size"),
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_spec_validation(case):
    override, match = BAD_SPECS[case]
    with pytest.raises(ValueError, match=match):
        ChunkWindowSpec(**spec_kwargs(**override))
    with pytest.raises(AssertionError):
        check_rejects(lambda: SpecChunkWindowSpec(**spec_kwargs(**override)), match)


def test_spec_validation_keeps_the_sliding_window_check():
    with pytest.raises(ValueError, match="sliding_window"):
        ChunkWindowSpec(**spec_kwargs(sliding_window=7))
    with pytest.raises(ValueError, match="window_chunks"):
        ChunkWindowSpec(**spec_kwargs(window_chunks=True))  # a bool is not a chunk count


def test_spec_accepted_chunk_size_half_evicts_a_chunk():
    """What the missing ``chunk_size % block_size`` check costs: a chunk half on the null block."""
    spec = SpecChunkWindowSpec(**spec_kwargs(block_size=4, chunk_size=6, window_chunks=1, sink_chunks=0))
    with pytest.raises(AssertionError, match="token residency"):
        check_invariants(spec, num_chunks=4, manager_class=SpecChunkWindowManager)


# ── the eviction table ──────────────────────────────────────────────────────


@pytest.mark.parametrize("config", [(4, 8, 2, 1, False, 7), (4, 8, 2, 1, True, 6), (2, 2, 3, 0, False, 8)])
def test_eviction_table_matches_reference(config):
    block_size, chunk_size, window_chunks, sink_chunks, reset, num_chunks = config
    df = et.eviction_table(*config)
    assert list(df.columns) == ["chunk", "committed", "table", "block_ids", "held", "free"]
    assert df["chunk"].tolist() == list(range(num_chunks))
    per_chunk = chunk_size // block_size
    num_gpu_blocks = num_chunks * per_chunk + 2
    for c, row in df.iterrows():
        roles = chunk_roles(c, window_chunks, sink_chunks, reset)
        roles[c] = "S" if c < sink_chunks else "C"
        expected = " ".join(roles[i] * per_chunk for i in range(c + 1))
        assert row["table"] == expected
        ids = row["block_ids"].split()
        marks = row["table"].replace(" ", "")
        assert len(ids) == len(marks) == (c + 1) * per_chunk
        assert [i == "-" for i in ids] == [m == "." for m in marks]
        assert row["committed"] == (c + 1) * chunk_size
        assert row["held"] == sum(m != "." for m in marks)
        assert row["free"] + row["held"] == num_gpu_blocks - 1


def test_eviction_table_main_prints_markdown(capsys):
    et._main(["4", "8", "2", "1", "0", "5"])
    out = capsys.readouterr().out
    assert "strategy=sliding" in out
    assert re.search(r"^\|\s*chunk\s*\|", out, re.M)
    assert "SS .. WW WW CC" in out
    with pytest.raises(SystemExit):
        et._main(["4", "8"])
