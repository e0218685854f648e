"""A pool replaced every step: the out-of-place update rebound (``pool_replaced``), and the copies a program
asks for itself (notes that carry their bytes per call).

``self.keys = self.keys.index_copy(2, pos, k)`` (the classic StaticCache regression) passed as clean: the
graph returns a fresh cache and Dynamo rebinds the attribute, so there is no ``copy_`` epilogue to find.
Truths: the pools' identity (their storage pointer before and after each step) and the cache-sized buffers
of Inductor's generated code. Negative controls: the in-place ``index_copy_`` twin (same pointer, no
buffer, clean), and a cache the host rebuilds between steps (another tensor, but none a region returned).
"""

from __future__ import annotations

import itertools
import re

import pytest
import torch
from _checks import pool_sized_allocations

from compile_checks.api import CloneCheck
from compile_checks.case import Case, run_case
from compile_checks.check.pool_identity import PoolIdentityWatch
from compile_checks.pools import pools_from_module
from compile_checks.vocab import CopyKind

B, H, S, D = 1, 2, 32, 8
CACHE_BYTES = B * H * S * D * 4
STEPS = 3


class StaticCache(torch.nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.keys = torch.zeros(B, H, S, D)
        self.values = torch.zeros(B, H, S, D)

    def forward(self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.mode == "rebind":  # out of place, rebound: a new cache every step
            self.keys = self.keys.index_copy(2, pos, k)
            self.values = self.values.index_copy(2, pos, v)
        elif self.mode == "clone":  # the program's own copy of the keys, written and read
            kc = self.keys.clone()
            kc.index_copy_(2, pos, k)
            self.values.index_copy_(2, pos, v)
            return kc.sum() + self.values.sum()
        elif self.mode == "roll":  # a sliding window: shift by one, write the newest position
            self.keys.copy_(torch.roll(self.keys, -1, 2))
            self.keys[:, :, -1:] = k
            self.values.index_copy_(2, pos, v)
        else:  # in place
            self.keys.index_copy_(2, pos, k)
            self.values.index_copy_(2, pos, v)
        return self.keys.sum() + self.values.sum()


def _steps(m: StaticCache, step) -> list[int]:
    """Run the steps; the keys' storage pointer before the first and after each step (identity truth)."""
    ptrs = [m.keys.untyped_storage().data_ptr()]
    for i in range(STEPS):
        step(torch.tensor([i]), torch.ones(B, H, 1, D), torch.ones(B, H, 1, D))
        ptrs.append(m.keys.untyped_storage().data_ptr())
    return ptrs


def _full_check(mode: str):
    from torch._inductor.utils import run_and_get_code

    m = StaticCache(mode)
    check = CloneCheck(pools=lambda: pools_from_module(m, "keys", "values"))
    ptrs: list[int] = []

    def run() -> None:
        with check:
            ptrs.extend(_steps(m, check.compile(m)))

    _, codes = run_and_get_code(run)
    assert check.report is not None
    return check.report, ptrs, pool_sized_allocations("\n".join(codes), CACHE_BYTES), m


@pytest.mark.compile
@pytest.mark.parametrize("mode", ["rebind", "inplace"])
def test_a_replaced_pool_agrees_with_its_identity_and_the_generated_code(mode: str) -> None:
    report, ptrs, buffers, m = _full_check(mode)
    replaced = sum(a != b for a, b in itertools.pairwise(ptrs))
    copies = sorted((c.kind, c.pool, c.nbytes, c.op) for c in report.clones)
    if mode == "rebind":
        assert replaced == STEPS and buffers == [CACHE_BYTES, CACHE_BYTES]  # a new K and V cache each step
        assert copies == [
            (CopyKind.POOL_REPLACED, "keys", CACHE_BYTES, "aten::index_put"),
            (CopyKind.POOL_REPLACED, "values", CACHE_BYTES, "aten::index_put"),
        ]
        assert not report.check_passed and report.clone_bytes_per_run == 2 * CACHE_BYTES * STEPS
        assert sum(f"on {STEPS} of its {STEPS} call(s)" in n for n in report.notes) == 2
        assert all("index_copy_" in c.explanation.fix for c in report.clones)
    else:  # the negative control: written in place, the same tensor, no buffer, clean
        assert replaced == 0 and buffers == [] and copies == [] and report.check_passed
    assert float(m.keys[:, :, :STEPS].sum()) == B * H * D * STEPS  # the cache holds every step either way


@pytest.mark.compile
@pytest.mark.parametrize("mode", ["clone", "roll"])
def test_copies_the_program_asks_for_are_notes_with_the_generated_codes_bytes(mode: str) -> None:
    """Not failures (the program asks for them), but priced: each note's bytes are a buffer of the code."""
    report, ptrs, buffers, _ = _full_check(mode)
    assert len(set(ptrs)) == 1 and report.clones == [] and report.check_passed
    noted = [int(b) for n in report.notes for b in re.findall(r"a copy of (\d+) bytes per call", n)]
    assert noted == buffers == [CACHE_BYTES]


def test_the_in_place_twin_has_no_such_note() -> None:
    m = StaticCache("inplace")
    check = CloneCheck(pools=lambda: pools_from_module(m, "keys", "values"), analysis_only=True)
    with check:
        _steps(m, check.compile(m))
    assert check.report is not None and check.report.check_passed
    assert not [n for n in check.report.notes if "bytes per call" in n]


def test_expected_replacement_passes_as_a_negative_control() -> None:
    """``expect_clean=False``: the case must keep seeing the replacement; the in-place twin then fails."""
    for mode, passed in (("rebind", True), ("inplace", False)):
        m = StaticCache(mode)
        case = Case(
            name=f"static_cache_{mode}",
            fn=m,
            pools=lambda m=m: pools_from_module(m, "keys", "values"),
            driver=lambda step, m=m: _steps(m, step),
            expect_clean=False,
            check_writes=False,
        )
        assert run_case(case, analysis_only=True).passed is passed


def test_a_cache_rebuilt_between_steps_is_followed_not_reported() -> None:
    """The engine reallocates its cache outside the region: another tensor, but not one a region returned."""
    m = StaticCache("inplace")
    check = CloneCheck(pools=lambda: pools_from_module(m, "keys", "values"), analysis_only=True)
    with check:
        step = check.compile(m)
        step(torch.tensor([0]), torch.ones(B, H, 1, D), torch.ones(B, H, 1, D))
        m.keys = torch.zeros(B, H, S, D)  # rebuilt by the host
        step(torch.tensor([1]), torch.ones(B, H, 1, D), torch.ones(B, H, 1, D))
    assert check.report is not None and check.report.clones == [] and check.report.check_passed


def test_the_watch_attributes_only_a_returned_storage() -> None:
    old, new, other = torch.zeros(4), torch.zeros(4), torch.zeros(4)
    watch = PoolIdentityWatch()
    watch.region_returned(0, (torch.zeros(()), new), ["aten::sum", "aten::index_put"])
    watch.compare({"k": old, "v": other}, {"k": new, "v": torch.zeros(4)})  # v: rebuilt, not returned
    watch.compare({"k": old}, {"k": old[:2]})  # the same storage under another view: no copy
    [c] = watch.clones()
    assert (c.pool, c.op, c.nbytes, c.kind) == ("k", "aten::index_put", 16, CopyKind.POOL_REPLACED)


@pytest.mark.compile
def test_a_users_clone_written_by_an_op_is_a_note_with_the_generated_codes_bytes() -> None:
    """``kc, vc = k.clone(), v.clone(); op(kc, vc); op(k, v)``: two pool-sized buffers in the code, two notes
    of their size, no copy reported (the real pools are written in place)."""
    from _soundness_steps import chunk, pools_split, users_own_copies_then_commit
    from torch._inductor.utils import run_and_get_code

    from compile_checks.api import analyze_pool_clones

    k, v = pools_split()
    report, codes = run_and_get_code(
        lambda: analyze_pool_clones(
            users_own_copies_then_commit, k, v, chunk(), torch.arange(4), pools={"k": k, "v": v}
        )
    )
    noted = [int(b) for n in report.notes for b in re.findall(r"a copy of (\d+) bytes per call", n)]
    assert noted == pool_sized_allocations("\n".join(codes), k.numel() * 4) == [k.numel() * 4] * 2
    assert report.clones == [] and report.check_passed
