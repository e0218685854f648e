"""The commit op ``torch.ops.ar_paging.paged_write``: batched writes, named errors, opcheck.

The spec's ``pool_write_chunk`` (copied below) wrote only batch index 0; the batched
check is run on it too and must fail.
"""

from __future__ import annotations

import pytest
import torch
from _checks import check_rejects
from hypothesis import given, settings
from hypothesis import strategies as st

import ar_paging  # registers torch.ops.ar_paging
from ar_paging import pool_write_chunk

H, D = 2, 4  # kv heads, head dim


def make_pools(num_slots: int, dtype=torch.float32):
    return torch.zeros(num_slots, H, D, dtype=dtype), torch.zeros(num_slots, H, D, dtype=dtype)


def reference_write(k_pool, v_pool, new_k, new_v, slot_mapping):
    """Token-by-token loop: what the pools must hold after the commit."""
    k_ref, v_ref = k_pool.clone(), v_pool.clone()
    slots = slot_mapping.tolist()
    if new_k.dim() == 3:
        new_k, new_v = new_k.unsqueeze(0), new_v.unsqueeze(0)
    if slot_mapping.dim() == 1:
        slots = [slots]
    for b, row in enumerate(slots):
        for t, slot in enumerate(row):
            k_ref[slot] = new_k[b, t]
            v_ref[slot] = new_v[b, t]
    return k_ref, v_ref


def spec_pool_write_chunk(k_pool, v_pool, new_k, new_v, slot_mapping):
    """The reference spec's version, verbatim."""
    k_pool[slot_mapping] = new_k[0]  # batch index 0
    v_pool[slot_mapping] = new_v[0]


def check_batched_commit(write, batch: int = 3, chunk: int = 4, num_slots: int = 32) -> None:
    """Every sequence's K/V lands in its own row of slots; nothing else changes."""
    gen = torch.Generator().manual_seed(batch * 100 + chunk)
    k_pool, v_pool = make_pools(num_slots)
    k_pool += 0.5  # distinguishable from zero writes
    slot_mapping = torch.randperm(num_slots, generator=gen)[: batch * chunk].reshape(batch, chunk)
    new_k = torch.randn(batch, chunk, H, D, generator=gen)
    new_v = torch.randn(batch, chunk, H, D, generator=gen)
    k_ref, v_ref = reference_write(k_pool, v_pool, new_k, new_v, slot_mapping)
    write(k_pool, v_pool, new_k, new_v, slot_mapping)
    for b in range(batch):
        assert torch.equal(k_pool[slot_mapping[b]], new_k[b]), f"sequence {b}: K not in its slots"
        assert torch.equal(v_pool[slot_mapping[b]], new_v[b]), f"sequence {b}: V not in its slots"
    assert torch.equal(k_pool, k_ref) and torch.equal(v_pool, v_ref), "slots outside the mapping changed"


def test_batched_commit_writes_every_sequence():
    check_batched_commit(pool_write_chunk)
    check_batched_commit(torch.ops.ar_paging.paged_write)


def test_spec_batched_commit_fails_the_check():
    with pytest.raises(AssertionError, match="sequence 1"):
        check_batched_commit(spec_pool_write_chunk)


@settings(deadline=None, max_examples=40)
@given(
    data=st.data(),
    batch=st.integers(1, 4),
    chunk=st.integers(1, 8),
    layout=st.sampled_from(["2d", "1d_batch1", "3d_tokens"]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)
def test_write_matches_token_loop(data, batch, chunk, layout, dtype):
    if layout != "2d":
        batch = 1
    num_slots = data.draw(st.integers(batch * chunk, batch * chunk + 40))
    perm = data.draw(st.permutations(list(range(num_slots))))
    slots = torch.tensor(perm[: batch * chunk], dtype=torch.long).reshape(batch, chunk)
    seed = data.draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    new_k = torch.randn(batch, chunk, H, D, generator=gen).to(dtype)
    new_v = torch.randn(batch, chunk, H, D, generator=gen).to(dtype)
    if layout == "1d_batch1":
        slots = slots[0]
    elif layout == "3d_tokens":
        slots, new_k, new_v = slots[0], new_k[0], new_v[0]
    k_pool, v_pool = make_pools(num_slots, dtype)
    k_pool.normal_(generator=gen)
    k_ref, v_ref = reference_write(k_pool, v_pool, new_k, new_v, slots)
    k_ptr = k_pool.data_ptr()
    torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slots)
    assert k_pool.data_ptr() == k_ptr  # in place
    assert torch.equal(k_pool, k_ref)
    assert torch.equal(v_pool, v_ref)


# ── named ValueErrors ───────────────────────────────────────────────────────

NUM_SLOTS, B, L = 16, 2, 3


def _args(**override):
    args = dict(
        k_pool=torch.zeros(NUM_SLOTS, H, D),
        v_pool=torch.zeros(NUM_SLOTS, H, D),
        new_k=torch.ones(B, L, H, D),
        new_v=torch.ones(B, L, H, D),
        slot_mapping=torch.arange(B * L, dtype=torch.long).reshape(B, L),
    )
    args.update(override)
    return args


OTHER_DEVICE = "cuda" if torch.cuda.is_available() else "meta"

BAD_WRITES = {
    "slot_mapping_int32": (dict(slot_mapping=torch.arange(B * L, dtype=torch.int32).reshape(B, L)), "slot_mapping"),
    "slot_mapping_float": (dict(slot_mapping=torch.arange(B * L, dtype=torch.float32).reshape(B, L)), "slot_mapping"),
    "slot_mapping_too_short": (dict(slot_mapping=torch.arange(B * (L - 1)).reshape(B, L - 1)), "slot_mapping"),
    "slot_mapping_too_long": (dict(slot_mapping=torch.arange(B * (L + 1)).reshape(B, L + 1)), "slot_mapping"),
    "slot_mapping_1d_with_batch": (dict(slot_mapping=torch.arange(L)), "slot_mapping"),
    "slot_mapping_2d_with_3d_kv": (
        dict(new_k=torch.ones(L, H, D), new_v=torch.ones(L, H, D), slot_mapping=torch.arange(L).reshape(1, L)),
        "slot_mapping",
    ),
    "new_k_heads_mismatch": (dict(new_k=torch.ones(B, L, H + 1, D), new_v=torch.ones(B, L, H + 1, D)), "new_k"),
    "new_k_head_dim_mismatch": (dict(new_k=torch.ones(B, L, H, D * 2)), "new_k"),
    "new_k_2d": (dict(new_k=torch.ones(L, H * D)), "new_k"),
    "new_v_shape_mismatch": (dict(new_v=torch.ones(B, L - 1, H, D)), "new_v"),
    "new_k_dtype": (dict(new_k=torch.ones(B, L, H, D, dtype=torch.float64)), "new_k"),
    "k_pool_not_flat": (dict(k_pool=torch.zeros(4, 4, H, D), v_pool=torch.zeros(4, 4, H, D)), "k_pool"),
    "v_pool_shape": (dict(v_pool=torch.zeros(NUM_SLOTS + 1, H, D)), "v_pool"),
    "slot_mapping_device": (
        dict(slot_mapping=torch.arange(B * L, dtype=torch.long, device=OTHER_DEVICE).reshape(B, L)),
        "slot_mapping",
    ),
    "new_k_device": (dict(new_k=torch.ones(B, L, H, D, device=OTHER_DEVICE)), "new_k"),
}

# Slot *values*: checked only in debug mode (they cost a device sync); made valid by ar_paging.slot_mapping.
BAD_SLOT_VALUES = {
    "slot_past_pool": (dict(slot_mapping=torch.tensor([[0, 1, 2], [3, 4, NUM_SLOTS]])), "slot_mapping"),
    "slot_negative": (dict(slot_mapping=torch.tensor([[0, 1, 2], [3, 4, -1]])), "slot_mapping"),
    "slot_duplicate": (dict(slot_mapping=torch.tensor([[0, 1, 2], [3, 4, 0]])), "slot_mapping"),
}


def check_rejected_without_writing(override: dict, match: str) -> None:
    args = _args(**override)
    k_before, v_before = args["k_pool"].clone(), args["v_pool"].clone()
    with pytest.raises(ValueError, match=match):
        torch.ops.ar_paging.paged_write(**args)
    assert torch.equal(args["k_pool"], k_before), "a rejected commit must not write anything"
    assert torch.equal(args["v_pool"], v_before), "a rejected commit must not write anything"


@pytest.mark.parametrize("case", list(BAD_WRITES))
def test_bad_write_is_a_named_value_error_and_writes_nothing(case):
    check_rejected_without_writing(*BAD_WRITES[case])


@pytest.mark.parametrize("case", list(BAD_SLOT_VALUES))
def test_bad_slot_values_rejected_in_debug_mode(case, debug_checks):
    check_rejected_without_writing(*BAD_SLOT_VALUES[case])


def test_bad_slot_values_pass_unchecked_by_default():
    """Negative control for the debug switch: by default a duplicate slot is not looked at (no sync)."""
    assert not ar_paging.debug_checks_enabled()
    args = _args(**BAD_SLOT_VALUES["slot_duplicate"][0])
    torch.ops.ar_paging.paged_write(**args)  # no error: one of the two writes lands
    assert args["k_pool"][0].eq(1).all()


@pytest.mark.parametrize(
    "case",
    ["slot_mapping_1d_with_batch", "slot_mapping_int32", "slot_past_pool", "slot_duplicate", "new_k_heads_mismatch"],
)
def test_spec_version_misses_the_error(case, debug_checks):
    override, match = {**BAD_WRITES, **BAD_SLOT_VALUES}[case]
    check_rejects(lambda: pool_write_chunk(**_args(**override)), match)
    with pytest.raises(AssertionError):
        check_rejects(lambda: spec_pool_write_chunk(**_args(**override)), match)


def test_1d_mapping_with_batch_is_rejected_where_spec_dropped_sequences():
    """The spec accepted a 1-D mapping with batch 2 and silently dropped sequence 1."""
    args = _args(new_k=torch.stack([torch.ones(L, H, D), 2 * torch.ones(L, H, D)]), slot_mapping=torch.arange(L))
    spec_pool_write_chunk(**args)
    assert not (args["k_pool"] == 2).any()  # sequence 1 is nowhere in the pool
    with pytest.raises(ValueError, match="batch"):
        pool_write_chunk(**_args(slot_mapping=torch.arange(L)))


# ── opcheck ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("layout", ["1d", "2d", "3d_tokens"])
def test_opcheck(layout):
    gen = torch.Generator().manual_seed(0)
    batch = 1 if layout != "2d" else 3
    k_pool, v_pool = torch.randn(24, H, D, generator=gen), torch.randn(24, H, D, generator=gen)
    new_k = torch.randn(batch, L, H, D, generator=gen)
    new_v = torch.randn(batch, L, H, D, generator=gen)
    slots = torch.randperm(24, generator=gen)[: batch * L].reshape(batch, L)
    if layout == "1d":
        slots = slots[0]
    elif layout == "3d_tokens":
        slots, new_k, new_v = slots[0], new_k[0], new_v[0]
    torch.library.opcheck(torch.ops.ar_paging.paged_write.default, (k_pool, v_pool, new_k, new_v, slots))
