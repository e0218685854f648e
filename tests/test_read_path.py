"""Split pools, and commit-then-read round trips under eviction driven by vLLM's real manager.

The reference is a dense per-request K/V tensor indexed by absolute position; what
``read_window`` returns must equal it restricted to the resident positions (sink +
window + the in-flight chunk), and nothing is ever read from or written to the null
block.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ar_paging.eviction_table as et
from ar_paging import (
    allocate_kv_pool_with_views,
    chunk_slot_mapping,
    gather_window,
    pool_write_chunk,
    read_window,
    resident_window,
)

H, D = 2, 4


# ── pools ───────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_pools_and_flat_views(dtype):
    num_blocks, bs, layers = 6, 4, 3
    kv_pools, k_pools, v_pools = allocate_kv_pool_with_views(num_blocks, bs, layers, H, D, dtype, "cpu")
    assert len(kv_pools) == len(k_pools) == len(v_pools) == layers
    storages = set()
    for layer in range(layers):
        k_cache, v_cache = kv_pools[layer]
        assert k_cache.shape == v_cache.shape == (num_blocks, bs, H, D)
        assert k_pools[layer].shape == v_pools[layer].shape == (num_blocks * bs, H, D)
        assert k_cache.dtype == dtype and not k_cache.any() and not v_cache.any()
        k_storage = k_cache.untyped_storage().data_ptr()
        v_storage = v_cache.untyped_storage().data_ptr()
        assert k_storage != v_storage, "K and V must be separate allocations"
        assert k_pools[layer].untyped_storage().data_ptr() == k_storage
        assert v_pools[layer].untyped_storage().data_ptr() == v_storage
        storages |= {k_storage, v_storage}
        # A flat-view write lands at cache[block, offset] of the same layer only.
        block, offset = 4, 3
        k_pools[layer][block * bs + offset] = layer + 1.0
        v_pools[layer][block * bs + offset] = -(layer + 1.0)
        assert (k_cache[block, offset] == layer + 1.0).all() and (v_cache[block, offset] == -(layer + 1.0)).all()
        assert int((k_cache != 0).sum()) == H * D and int((v_cache != 0).sum()) == H * D
    assert len(storages) == 2 * layers


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_blocks=0), "num_blocks"),
        (dict(block_size=0), "block_size"),
        (dict(num_layers=0), "num_layers"),
        (dict(num_kv_heads=-1), "num_kv_heads"),
        (dict(head_dim=True), "head_dim"),
    ],
)
def test_pool_validation(kwargs, match):
    args = dict(num_blocks=4, block_size=4, num_layers=1, num_kv_heads=H, head_dim=D, dtype=torch.float32, device="cpu")
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        allocate_kv_pool_with_views(**args)


# ── resident_window ─────────────────────────────────────────────────────────


@settings(deadline=None, max_examples=60)
@given(data=st.data(), block_size=st.integers(1, 8), null_id=st.integers(0, 3), as_tensor=st.booleans())
def test_resident_window_matches_token_walk(data, block_size, null_id, as_tensor):
    real = data.draw(st.lists(st.integers(0, 30).filter(lambda b: b != null_id), max_size=10, unique=True))
    table = list(real)
    for index in data.draw(st.lists(st.integers(0, 10), min_size=1 if not real else 0, max_size=6)):
        table.insert(min(index, len(table)), null_id)  # the null block repeats, real blocks never do
    num_tokens = data.draw(st.integers(0, len(table) * block_size))
    slots, positions = [], []
    pos = 0
    for block in table:
        for offset in range(block_size):
            if pos < num_tokens and block != null_id:
                slots.append(block * block_size + offset)
                positions.append(pos)
            pos += 1
    window = resident_window(torch.tensor(table) if as_tensor else table, num_tokens, block_size, null_id)
    assert window.slots.tolist() == slots
    assert window.positions.tolist() == positions
    assert len(window) == len(slots)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda k, v: read_window(k, v, [1, 2], 9, 4, 0), "num_tokens"),
        (lambda k, v: read_window(k, v, [1, 2], -1, 4, 0), "num_tokens"),
        (lambda k, v: read_window(k, v, [1, 5], 8, 4, 0), "block_ids"),
        (lambda k, v: read_window(k, v, [1, 2], 4, 0, 0), "block_size"),
        (lambda k, v: read_window(k, v, torch.tensor([1.0, 2.0]), 4, 4, 0), "block_ids"),
        (lambda k, v: gather_window(k, v, torch.tensor([0, 1], dtype=torch.int32)), "slots"),
        (lambda k, v: gather_window(k, v, torch.zeros(2, 2, dtype=torch.long)), "slots"),
    ],
)
def test_read_validation(call, match):
    k_pool, v_pool = torch.zeros(16, H, D), torch.zeros(16, H, D)
    with pytest.raises(ValueError, match=match):
        call(k_pool, v_pool)


# ── round trips under real eviction ─────────────────────────────────────────


def resident_chunks(chunk: int, window_chunks: int, sink_chunks: int, reset: bool) -> list[int]:
    """Chunks readable while ``chunk`` is in flight: sink, last completed window chunks, itself."""
    completed = list(range(chunk))
    sink = completed[:sink_chunks]
    rest = completed[sink_chunks:]
    window = [] if reset else rest[-window_chunks:]
    return sink + window + [chunk]


ROUND_TRIPS = [
    # block_size, chunk_size, window_chunks, sink_chunks, reset, batch
    (4, 8, 2, 1, False, 3),
    (2, 6, 1, 2, False, 2),
    (16, 16, 3, 0, False, 2),
    (4, 16, 1, 1, True, 2),
    (2, 2, 4, 2, True, 1),
]


@pytest.mark.parametrize("block_size,chunk_size,window_chunks,sink_chunks,reset,batch", ROUND_TRIPS)
def test_commit_then_read_round_trip(block_size, chunk_size, window_chunks, sink_chunks, reset, batch):
    num_chunks, num_layers = 9, 2
    spec = et.make_spec(block_size, chunk_size, window_chunks, sink_chunks, reset)
    per_chunk = chunk_size // block_size
    # Tight pool: eviction must recycle blocks across requests for the run to fit.
    peak = sink_chunks * per_chunk + (0 if reset else window_chunks * per_chunk) + per_chunk
    num_gpu_blocks = batch * peak + 1
    manager, pool = et.make_manager(spec, num_chunks, num_gpu_blocks=num_gpu_blocks)
    null_id = pool.null_block.block_id
    kv_pools, k_pools, v_pools = allocate_kv_pool_with_views(
        num_gpu_blocks, block_size, num_layers, H, D, torch.float32, "cpu"
    )
    gen = torch.Generator().manual_seed(block_size * 1000 + chunk_size)
    total = num_chunks * chunk_size
    dense_k = torch.randn(num_layers, batch, total, H, D, generator=gen)
    dense_v = torch.randn(num_layers, batch, total, H, D, generator=gen)
    rids = [f"req-{b}" for b in range(batch)]
    steppers = [et.step_chunks(manager, num_chunks, request_id=r) for r in rids]
    used_blocks: set[int] = set()
    for c, steps in enumerate(zip(*steppers)):
        lo, hi = c * chunk_size, (c + 1) * chunk_size
        slots = torch.stack([chunk_slot_mapping(s.block_ids, lo, chunk_size, block_size) for s in steps])
        assert slots.shape == (batch, chunk_size)
        assert not ((slots // block_size) == null_id).any(), "a commit targets the null block"
        used_blocks |= set((slots // block_size).flatten().tolist())
        for layer in range(num_layers):
            pool_write_chunk(k_pools[layer], v_pools[layer], dense_k[layer, :, lo:hi], dense_v[layer, :, lo:hi], slots)
        expected_pos = [
            p
            for ch in resident_chunks(c, window_chunks, sink_chunks, reset)
            for p in range(ch * chunk_size, (ch + 1) * chunk_size)
        ]
        for b, step in enumerate(steps):
            for layer in range(num_layers):
                k, v, positions = read_window(k_pools[layer], v_pools[layer], step.block_ids, hi, block_size, null_id)
                assert positions.tolist() == expected_pos, f"chunk {c} seq {b}: resident positions"
                assert torch.equal(k, dense_k[layer, b, positions]), f"chunk {c} seq {b} layer {layer}: K"
                assert torch.equal(v, dense_v[layer, b, positions]), f"chunk {c} seq {b} layer {layer}: V"
        for layer in range(num_layers):
            assert not kv_pools[layer][0][null_id].any() and not kv_pools[layer][1][null_id].any(), "null block written"
    # The tight pool was really recycled: more chunk writes than blocks.
    assert batch * num_chunks * per_chunk > len(used_blocks)
    for r in rids:
        manager.free(r)
    assert pool.get_num_free_blocks() == num_gpu_blocks - 1
