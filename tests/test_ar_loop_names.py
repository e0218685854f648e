"""Issue 16 item 7: pool names that mislead. Each next to its twin.

* a 0-element pool the function was given was reported "never received";
* a copy of an unnamed view of a named pool's storage was pinned on the named pool;
* two names for one tensor silently dropped one.
"""

from __future__ import annotations

import pytest
import torch
from _ar_loop_steps import (
    POOL_BYTES,
    D,
    H,
    N,
    evict_gather_commit,
    gather_commit_late,
    step_args,
)

from compile_checks.api import analyze_pool_clones
from compile_checks.pools import PoolNamingError

pytestmark = pytest.mark.compile


def _with_extra(k, v, x, slots, window, evicted, extra):
    return evict_gather_commit(k, v, x, slots, window, evicted) + extra.sum()


def test_a_passed_empty_pool_is_not_reported_never_received() -> None:
    k, v = torch.randn(N, H, D), torch.randn(N, H, D)
    empty = torch.empty(0, H, D)
    report = analyze_pool_clones(
        _with_extra, k, v, *step_args(), empty, pools={"k": k, "v": v, "empty": empty}, analysis_only=True
    )
    assert report.check_passed and report.unreceived_pools == []
    assert [n for n in report.notes if "'empty' has no elements" in n]


def test_a_stale_non_empty_pool_still_fails() -> None:
    """Twin: a real pool the function never received is still an error."""
    k, v = torch.randn(N, H, D), torch.randn(N, H, D)
    report = analyze_pool_clones(
        _with_extra,
        k,
        v,
        *step_args(),
        torch.empty(0, H, D),
        pools={"k": k, "v": v, "old": k.clone()},
        analysis_only=True,
    )
    assert not report.check_passed and report.unreceived_pools == ["old"]


@pytest.mark.parametrize("name_v", [False, True], ids=["v_unnamed", "v_named"])
def test_a_copy_of_an_unnamed_view_is_not_pinned_on_a_named_neighbour(name_v: bool) -> None:
    """Fused ``(2, N, H, D)``: V is cloned. Only K named: the copy matches no named pool (it used to
    be pinned on K); both named: it is V's."""
    kv = torch.randn(2, N, H, D)
    pools = {"k": kv[0], "v": kv[1]} if name_v else {"k": kv[0]}
    report = analyze_pool_clones(gather_commit_late, kv[0], kv[1], *step_args(), pools=pools, analysis_only=True)
    copies = [(c.arg, c.pool, c.nbytes) for c in report.clones + report.other_clones]
    assert copies == [("v_pool", "v" if name_v else None, 2 * POOL_BYTES)]
    assert not report.check_passed


@pytest.mark.parametrize("twice", [True, False], ids=["one_tensor_two_names", "distinct"])
def test_two_names_for_one_tensor_is_a_check_error(twice: bool) -> None:
    k, v = torch.randn(N, H, D), torch.randn(N, H, D)
    pools = {"k": k, "k_again": k, "v": v} if twice else {"k": k, "v": v}
    if twice:  # refused before anything compiles (compile_checks.pools.validate_pools), never a dropped name
        with pytest.raises(PoolNamingError, match="'k_again' is the same tensor as pool 'k'"):
            analyze_pool_clones(evict_gather_commit, k, v, *step_args(), pools=pools, analysis_only=True)
        return
    report = analyze_pool_clones(evict_gather_commit, k, v, *step_args(), pools=pools, analysis_only=True)
    assert report.check_passed
