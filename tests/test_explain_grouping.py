"""Explanations that differ only per layer, K/V, bytes, region and FX node numbering are printed once.

The many-layer negative control (``many_layers_per_region``: 6 copies, one per layer and K/V, each
read back by its own ``index_N``) printed six ~700-character explanations that said the same
thing. Negative controls: another cause, another fix or another source line stays its own group.
"""

from __future__ import annotations

from compile_checks.explain.grouping import alike, group_explanations

WHY = (
    "read_after_write: the old value of `{arg}` (layer{n}.{kv}) is read after the write by `{node}` "
    "(aten::index) at model.py:108 in the final order, so Inductor keeps a copy; `reorder_for_locality` "
    "moved that read below the write; written at model.py:{line}; fix: {fix}"
)
FIX = "keep the commit out of reach of `reorder_for_locality`"


def _why(n: int, kv: str, node: str, *, line: int = 63, fix: str = FIX) -> tuple[str, str]:
    return f"layer{n}.{kv}", WHY.format(arg=f"{kv}_pool", n=n, kv=kv, node=node, line=line, fix=fix)


def test_six_copies_of_three_layers_share_one_explanation() -> None:
    items = [
        _why(n, kv, "index" if i == 0 else f"index_{i}")
        for i, (n, kv) in enumerate((n, kv) for n in range(3) for kv in "kv")
    ]
    [(label, text, count)] = group_explanations(items)
    assert (label, count) == ("layers 0-2", 6)
    assert text == items[0][1]  # worded for the first copy


def test_another_fix_or_source_line_is_its_own_group() -> None:
    items = [_why(0, "k", "index"), _why(1, "k", "index_1", fix="commit first"), _why(2, "v", "index_2", line=70)]
    assert [count for _, _, count in group_explanations(items)] == [1, 1, 1]


def test_names_that_are_not_numbered_nodes_keep_their_difference() -> None:
    assert alike("`index_put` at a") != alike("`index` at a")  # another op, not a numbered twin
    assert alike("`index_3` at a") == alike("`index` at a") == alike("`index_12` at a")
    assert alike("written at model.py:63") != alike("written at model.py:70")


def test_pools_named_in_the_users_own_words_group_too() -> None:
    """``l0.v`` / ``l1.v`` (a newcomer's names, not ``layerN``): one explanation for both layers, not two."""
    why = (
        "shared_storage: `v_pool` ({n}.v) shares one storage with `k_pool` ({n}.k); Inductor writes `k_pool` ({n}.k) "
        "in place and must clone the shared storage for `v_pool` ({n}.v) (8192 bytes); written at tinylm.py:18"
    )
    items = [(f"{n}.v", why.format(n=n)) for n in ("l0", "l1", "blocks.3.attn")]
    [(label, text, count)] = group_explanations(items)
    assert (label, count, text) == ("l0.v, l1.v, blocks.3.attn.v", 3, items[0][1])
    # negative controls: another cause, or a byte count in parentheses, is not a pool name
    other = why.replace("shared_storage", "read_after_write")
    assert alike(why.format(n="l0")) != alike(other.format(n="l1"))
    assert alike("(8192 bytes)") != alike("(l0.v)") and alike("(v2)") != alike("(v1)")
