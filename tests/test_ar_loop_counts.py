"""Issue 16 item 5: one copy per buffer the generated code allocates, with that buffer's bytes.

Each shape used to be miscounted: a v2 clone of a shared base once per argument;
``kv.unbind(0)`` / ``kv.chunk(2)`` under v1 as one ``select_scatter``/``slice_scatter`` copy
plus "asked for" notes; two kept ``index_put`` into one pool as one; a range commit
``k[a:b] = x`` as a whole-pool copy though Inductor writes it in one pass with no buffer.
Truth: the pool-sized buffers plain ``torch.compile`` allocates for the same function.
"""

from __future__ import annotations

import pytest
import torch
from _ar_loop_steps import (
    POOL_BYTES,
    fused_args,
    fused_kv_chunk_late_read,
    fused_kv_late_read,
    fused_kv_unbind,
    generated_copies,
    op_then_aten_commit_read_before,
    pools_split,
    range_commit_after_gather,
    reported_copies,
    step_args,
    two_kept_index_puts,
)

from compile_checks.api import analyze_pool_clones

pytestmark = pytest.mark.compile

FUSED = {fused_kv_late_read, fused_kv_unbind, fused_kv_chunk_late_read}

# (fn, functionalization) -> the copies the check must report: (op, arg, pool, bytes, written back)
CASES = {
    (fused_kv_late_read, "v2"): [("ar_paging::paged_write", "k_pool", "k", 2 * POOL_BYTES, 2 * POOL_BYTES)],
    (fused_kv_unbind, "v1"): [
        ("ar_paging::paged_write", "k_pool", "k", POOL_BYTES, POOL_BYTES),
        ("ar_paging::paged_write", "v_pool", "v", 2 * POOL_BYTES, POOL_BYTES),
    ],
    (fused_kv_chunk_late_read, "v1"): [
        ("ar_paging::paged_write", "k_pool", "k", POOL_BYTES, POOL_BYTES),
        ("ar_paging::paged_write", "v_pool", "v", 2 * POOL_BYTES, POOL_BYTES),
    ],
    (op_then_aten_commit_read_before, "v2"): [("ar_paging::paged_write", "k_pool", "k", POOL_BYTES, POOL_BYTES)],
    (two_kept_index_puts, "v2"): [
        ("aten::index_put", "self", "k", POOL_BYTES, 0),
        ("aten::index_put", "self", "k", POOL_BYTES, POOL_BYTES),
    ],
    (range_commit_after_gather, "v2"): [],
}


def _args(fn):
    torch.manual_seed(0)
    if fn in FUSED:
        kv, *rest = fused_args()
        return (kv, *rest), {"k": kv[0], "v": kv[1]}
    k, v = pools_split()
    return (k, v, *step_args()), ({"k": k, "v": v} if fn is op_then_aten_commit_read_before else {"k": k})


@pytest.mark.slow
@pytest.mark.parametrize(("fn", "functionalization"), list(CASES), ids=[f"{f.__name__}-{v}" for f, v in CASES])
def test_count_and_bytes_equal_the_generated_code(fn, functionalization: str) -> None:
    args, pools = _args(fn)
    report = analyze_pool_clones(fn, *args, pools=pools, functionalization=functionalization, analysis_only=True)
    got = sorted((c.op, c.arg, c.pool, c.nbytes, c.written_bytes) for c in report.clones + report.other_clones)
    assert got == sorted(CASES[(fn, functionalization)])
    assert report.errors == []
    assert not [n for n in report.notes if "asked for" in n]
    args, _ = _args(fn)
    assert reported_copies(report) == generated_copies(fn, lambda f: f(*args), functionalization)
    if fn is range_commit_after_gather:
        assert [n for n in report.notes if "read-modify-write pass" in n and f"{POOL_BYTES} bytes" in n]
