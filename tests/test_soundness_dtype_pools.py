"""Bytes of a pool viewed as another dtype are the bytes the generated code copies.

vLLM allocates its KV caches as raw bytes and views them per layer. A ``uint8`` pool ``(64, 64)`` written
through ``pool.view(torch.float32)[slots, :4] = x`` makes Inductor's code copy the slice into a buffer for
the ``index_put`` (1024 B) and the whole pool into another (4096 B: the scatter back through the dtype view
is realized) before copying it back; the check said 1024 B. Truth: the buffers the generated code
allocates (caches off), in both modes. Negative control: the same write into a ``float32`` pool has no
dtype view to go through: only the ``index_put``'s 1024 B buffer.
"""

from __future__ import annotations

import pytest
import torch
from _checks import allocated_buffers
from torch._inductor.utils import run_and_get_code

from compile_checks.api import CloneCheck
from compile_checks.check.findings import CloneReport

pytestmark = pytest.mark.compile

SLOTS = torch.tensor([1, 3])


def _write(pool: torch.Tensor, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    rows = pool.view(torch.float32) if pool.dtype == torch.uint8 else pool
    rows[slots, :4] = x
    return x.sum()


def _buffers(code: str) -> list[int]:
    """Bytes of every non-scalar buffer the code allocates (the step returns a scalar)."""
    return allocated_buffers(code)


def _check(dtype: torch.dtype, full: bool) -> tuple[CloneReport, list[int]]:
    pool = torch.zeros(64, 64, dtype=torch.uint8) if dtype == torch.uint8 else torch.zeros(64, 16)
    check = CloneCheck(pools={"pool": pool}, analysis_only=not full)

    def run() -> None:
        with check:
            check.compile(_write)(pool, torch.ones(2, 4), SLOTS)

    if full:
        _, codes = run_and_get_code(run)
    else:
        run()
        codes = []
    expected = torch.zeros(64, 16)
    expected[SLOTS, :4] = 1
    assert torch.equal(pool.view(torch.float32), expected)  # the compiled step wrote what eager writes
    assert check.report is not None and check.report.errors == [] and not check.report.undecided
    return check.report, [b for code in codes for b in _buffers(code)]


@pytest.mark.parametrize(("dtype", "truth"), [(torch.uint8, [1024, 4096]), (torch.float32, [1024])])
def test_a_dtype_viewed_pool_copies_the_bytes_of_the_generated_code(dtype: torch.dtype, truth: list[int]) -> None:
    full, buffers = _check(dtype, full=True)
    assert buffers == truth  # the generated code's buffers
    assert sorted(c.nbytes for c in full.clones) == truth and full.clone_bytes == sum(truth)
    assert all(c.pool == "pool" for c in full.clones)
    analysis, _ = _check(dtype, full=False)  # the gate's default mode: the same bytes
    assert sorted(c.nbytes for c in analysis.clones) == truth and analysis.clone_bytes == sum(truth)
