"""The fix a copy's explanation advises depends on how the pool is written, and applying it removes the copy
from Inductor's generated code (full compile, caches off).

K and V as two views of one ``(2, ...)`` allocation:
- written by an opaque op (``ar_paging::paged_write``) with the views split outside the region: the op's
  second argument on the shared storage is cloned (``shared_storage``); the advice, passing the allocation
  whole and taking ``kv[0]`` / ``kv[1]`` inside, compiles copy-free;
- written by plain ATen writes with the allocation passed whole and split inside (gpt-fast's fused buffer):
  the writes through views taken inside are copied; the advice for ATen writes, the views split outside and
  passed in, compiles copy-free. The opaque op's advice (the whole-tensor form) is the layout ATen writes copy,
  so it must not be the advice for them.
"""

from __future__ import annotations

import pytest
import torch
from _checks import pool_sized_allocations

import ar_paging  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
from compile_checks import Case, run_case
from compile_checks.explain.explanations import ATEN_FIXES, FIXES, fix_for
from compile_checks.vocab import Cause, WriteKind

pytestmark = [pytest.mark.compile, pytest.mark.slow]

SLOTS, H, D = 64, 2, 8
POOL_BYTES = SLOTS * H * D * 4  # one of K or V
WHOLE_FORM = "pass the one `(2, ...)` allocation whole and take `kv[0]` / `kv[1]` inside"
SPLIT_OUTSIDE = "split a `(2, ...)` cache outside it and pass `kv[0]` / `kv[1]` as two inputs"


@pytest.fixture(autouse=True)
def _no_caches() -> None:
    torch._inductor.config.force_disable_caches = True


def op_split(k_pool, v_pool, new_k, new_v, slots):  # type: ignore[no-untyped-def]
    torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slots)
    return new_k.sum()


def op_whole(kv, new_k, new_v, slots):  # type: ignore[no-untyped-def]
    torch.ops.ar_paging.paged_write(kv[0], kv[1], new_k, new_v, slots)
    return new_k.sum()


def aten_whole(kv, new_k, new_v, slots):  # type: ignore[no-untyped-def]
    k_out, v_out = kv[0], kv[1]  # gpt-fast's KVCache.update on one fused buffer
    k_out[slots] = new_k
    v_out[slots] = new_v
    return new_k.sum()


def aten_split(k_pool, v_pool, new_k, new_v, slots):  # type: ignore[no-untyped-def]
    k_pool[slots] = new_k
    v_pool[slots] = new_v
    return new_k.sum()


def _run(fn, whole: bool, expect_clean: bool):  # type: ignore[no-untyped-def]
    kv = torch.zeros(2, SLOTS, H, D)
    new = (torch.randn(4, H, D), torch.randn(4, H, D), torch.tensor([3, 9, 17, 40]))
    args = (kv, *new) if whole else (kv[0], kv[1], *new)
    case = Case(fn.__name__, fn, args=args, pools={"k": kv[0], "v": kv[1]}, expect_clean=expect_clean, dynamic=False)
    result = run_case(case, analysis_only=False)
    code = "".join(g for s in result.report.sources.values() for g in s.generated)
    assert code, "no generated code: the case was not fully compiled"
    return result, pool_sized_allocations(code, POOL_BYTES)


def test_opaque_op_shared_storage_advice_compiles_copy_free() -> None:
    result, allocated = _run(op_split, whole=False, expect_clean=False)
    assert result.passed and allocated, (result.failure_reasons(), allocated)
    [clone] = result.report.clones
    assert clone.explanation.cause == Cause.SHARED_STORAGE and WHOLE_FORM in clone.explanation.fix
    fixed, allocated = _run(op_whole, whole=True, expect_clean=True)  # the advice applied
    assert fixed.passed and fixed.report.clones == [] and allocated == [], (fixed.failure_reasons(), allocated)


def test_aten_writes_advice_is_the_split_views_and_compiles_copy_free() -> None:
    result, allocated = _run(aten_whole, whole=True, expect_clean=False)
    assert result.passed and allocated, (result.failure_reasons(), allocated)
    causes = {c.explanation.cause for c in result.report.clones}
    assert {c.pool for c in result.report.clones} == {"k", "v"} and causes == {Cause.VIEW_NOT_WRITTEN_BACK}, causes
    fixes = {c.explanation.fix for c in result.report.clones}
    assert all(SPLIT_OUTSIDE in f for f in fixes), fixes
    assert not any(WHOLE_FORM in f for f in fixes), fixes  # the op's advice is the layout that copies here
    fixed, allocated = _run(aten_split, whole=False, expect_clean=True)  # the advice applied
    assert fixed.passed and fixed.report.clones == [] and allocated == [], (fixed.failure_reasons(), allocated)


@pytest.mark.parametrize("cause", list(ATEN_FIXES))
def test_every_aten_advice_differs_from_the_ops_and_never_advises_the_whole_form(cause: str) -> None:
    assert fix_for(cause, None, WriteKind.ATEN) == ATEN_FIXES[cause] != FIXES[cause]
    assert WHOLE_FORM not in ATEN_FIXES[cause]
    assert fix_for(cause, None, WriteKind.OPAQUE_OP) == FIXES[cause]
