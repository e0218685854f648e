"""Slot mapping: properties against a token-by-token reference, and named input errors.

The reference walks the block table block by block, token by token, and never uses
``//`` or ``%``; the spec's version (copied below) is checked to miss the errors
ours raises.
"""

from __future__ import annotations

import pytest
import torch
from _checks import check_rejects
from hypothesis import given, settings
from hypothesis import strategies as st

from ar_paging import chunk_slot_mapping, compute_slot_mapping, resident_block_ids

SETTINGS = settings(deadline=None, max_examples=60)


def reference_slots(block_ids: list[int], block_size: int) -> list[int]:
    """slot of every position the table covers, by walking blocks token by token."""
    slots = []
    for block in block_ids:
        first = block * block_size
        for offset in range(block_size):
            slots.append(first + offset)
    return slots


@st.composite
def tables(draw, max_blocks: int = 12):
    block_size = draw(st.integers(1, 16))
    block_ids = draw(st.lists(st.integers(0, 300), min_size=1, max_size=max_blocks, unique=True))
    return block_size, block_ids


@SETTINGS
@given(data=st.data(), table=tables())
def test_compute_slot_mapping_matches_token_walk(data, table):
    block_size, block_ids = table
    ref = reference_slots(block_ids, block_size)
    positions = data.draw(st.lists(st.integers(0, len(ref) - 1), max_size=40))
    as_tensor = data.draw(st.booleans())
    got = compute_slot_mapping(
        torch.tensor(block_ids) if as_tensor else block_ids,
        torch.tensor(positions, dtype=torch.long) if as_tensor else positions,
        block_size,
    )
    assert got.dtype == torch.long
    assert got.shape == (len(positions),)
    assert got.tolist() == [ref[p] for p in positions]


@SETTINGS
@given(data=st.data(), table=tables())
def test_chunk_slot_mapping_matches_token_walk(data, table):
    block_size, block_ids = table
    ref = reference_slots(block_ids, block_size)
    chunk_size = data.draw(st.integers(1, len(ref)))
    start = data.draw(st.integers(0, len(ref) - chunk_size))
    got = chunk_slot_mapping(block_ids, start, chunk_size, block_size)
    assert got.tolist() == ref[start : start + chunk_size]
    # Distinct blocks -> distinct slots: a chunk never writes one slot twice.
    assert len(set(got.tolist())) == chunk_size


@SETTINGS
@given(data=st.data(), table=tables())
def test_chunk_past_the_table_is_rejected(data, table):
    block_size, block_ids = table
    capacity = len(block_ids) * block_size
    chunk_size = data.draw(st.integers(1, capacity + 4))
    start = data.draw(st.integers(max(0, capacity - chunk_size + 1), capacity + 4))
    with pytest.raises(ValueError, match="num_computed_tokens"):
        chunk_slot_mapping(block_ids, start, chunk_size, block_size)


@st.composite
def tables_with_nulls(draw, max_id: int = 20):
    """A block table whose real blocks are distinct and whose null block may repeat."""
    null_id = draw(st.integers(0, max_id))
    real = draw(st.lists(st.integers(0, max_id).filter(lambda b: b != null_id), max_size=12, unique=True))
    table = list(real)
    for index in draw(st.lists(st.integers(0, 12), max_size=6)):
        table.insert(min(index, len(table)), null_id)
    return table, null_id


@SETTINGS
@given(table=tables_with_nulls())
def test_resident_block_ids_drops_exactly_the_null_block(table):
    block_ids, null_id = table
    expected = []
    for b in block_ids:
        if b != null_id:
            expected.append(b)
    assert resident_block_ids(block_ids, null_id) == expected
    assert resident_block_ids(torch.tensor(block_ids, dtype=torch.long), null_id) == expected


# ── named ValueErrors ───────────────────────────────────────────────────────


def spec_compute_slot_mapping(block_ids, positions, block_size):
    """The reference spec's version, verbatim."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    table = torch.as_tensor(block_ids, dtype=torch.long)
    pos = torch.as_tensor(positions, dtype=torch.long)
    block_index = torch.div(pos, block_size, rounding_mode="floor")
    offset = pos % block_size
    return table[block_index] * block_size + offset


def spec_chunk_slot_mapping(block_ids, num_computed_tokens, chunk_size, block_size):
    positions = torch.arange(num_computed_tokens, num_computed_tokens + chunk_size, dtype=torch.long)
    return spec_compute_slot_mapping(block_ids, positions, block_size)


TABLE = [7, 3, 9]
BS = 4

# (id, call(compute_fn, chunk_fn), argument the message must name, spec already raised it)
BAD_INPUTS = [
    ("block_size_zero", lambda f, c: f(TABLE, [0], 0), "block_size", True),
    ("block_size_negative", lambda f, c: f(TABLE, [0], -2), "block_size", True),
    ("negative_position", lambda f, c: f(TABLE, [0, -1], BS), "positions", False),
    ("position_past_table", lambda f, c: f(TABLE, [len(TABLE) * BS], BS), "positions", False),
    ("float_positions", lambda f, c: f(TABLE, torch.tensor([0.5, 1.7]), BS), "positions", False),
    ("2d_positions", lambda f, c: f(TABLE, torch.zeros(2, 2, dtype=torch.long), BS), "positions", False),
    ("negative_block_id", lambda f, c: f([1, -3], [5], BS), "block_ids", False),
    ("chunk_negative_start", lambda f, c: c(TABLE, -1, 2, BS), "num_computed_tokens", False),
    ("chunk_past_table", lambda f, c: c(TABLE, 10, 4, BS), "num_computed_tokens", False),
    ("chunk_size_zero", lambda f, c: c(TABLE, 0, 0, BS), "chunk_size", False),
]


@pytest.mark.parametrize("call,match", [(c, m) for _, c, m, _ in BAD_INPUTS], ids=[i for i, *_ in BAD_INPUTS])
def test_bad_input_is_a_named_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(compute_slot_mapping, chunk_slot_mapping)


SPEC_MISSED = [(i, c, m) for i, c, m, spec_ok in BAD_INPUTS if not spec_ok]


@pytest.mark.parametrize("call,match", [(c, m) for _, c, m in SPEC_MISSED], ids=[i for i, *_ in SPEC_MISSED])
def test_spec_version_fails_the_same_check(call, match):
    check_rejects(lambda: call(compute_slot_mapping, chunk_slot_mapping), match)
    with pytest.raises(AssertionError):
        check_rejects(lambda: call(spec_compute_slot_mapping, spec_chunk_slot_mapping), match)


def test_spec_negative_position_silently_aliases_another_slot():
    """Why it matters: the spec maps position -1 to the *last* block's last slot."""
    got = spec_compute_slot_mapping(TABLE, [-1], BS)
    assert got.tolist() == [TABLE[-1] * BS + BS - 1]
