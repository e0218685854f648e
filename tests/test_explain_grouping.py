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


def test_format_report_says_a_shared_explanation_once_over_named_and_unnamed_copies() -> None:
    """The summary grouped region 1's ``l0.v`` and then spelt the same explanation out in full again for the
    copy listed in another section. Now every copy of the report is grouped together: one explanation, each
    copy on its own line. Negative control: ``verbose`` prints each copy's own."""
    import torch

    from compile_checks.api import format_report
    from compile_checks.check.findings import CloneReport, SurvivingClone
    from compile_checks.explain.explanations import Explanation
    from compile_checks.vocab import Cause

    def copy(pool: str, region: int, *, named: bool = True) -> SurvivingClone:
        why = f"`v_pool` ({pool}) shares one storage with `k_pool`; region {region}"
        explanation = Explanation(Cause.SHARED_STORAGE, why, user_line="tinylm.py:46", fix="allocate K and V apart")
        return SurvivingClone(
            "ar_paging::paged_write",
            "v_pool",
            8192,
            (2048,),
            torch.float32,
            pool=pool if named else None,
            region=region,
            explanation=explanation,
        )

    named, unnamed = [copy("l0.v", 1), copy("l1.v", 1)], [copy("l0.v", 2, named=False)]
    text = format_report(CloneReport(clones=named, other_clones=unnamed, num_regions=2, region_calls={1: 1, 2: 1}))
    assert text.count("shares one storage") == 1, text
    assert "l0.v, l1.v, <unnamed input> (3 copies, explained alike; worded for the first):" in text, text
    assert text.count("- ar_paging::paged_write argument 'v_pool'") == 3, text
    verbose = format_report(CloneReport(clones=named, other_clones=unnamed, num_regions=2), verbose=True)
    assert verbose.count("shares one storage") == 3 and "explained alike" not in verbose, verbose
