"""A FlashInfer-style region that takes the whole ``(num_blocks, 2, block, H, D)`` cache, its pools named as
the views ``kv[:, 0]`` / ``kv[:, 1]``: a pool that is a view of a region input is received, and the verdict
is the generated code's (caches off). Writing ``k[blocks, offs] = x`` through the views leaves one
``index_put`` per half functional: one half-sized buffer each (the pool's bytes, not the whole cache's).
Negative controls: the read-only twin (received, clean) and pools that are views of another tensor (never
received: an error).
"""

from __future__ import annotations

import pytest
import torch
from _checks import pool_sized_allocations
from torch._inductor.utils import run_and_get_code

from compile_checks.api import CloneCheck
from compile_checks.check.findings import CloneReport

pytestmark = pytest.mark.compile

NB, BS, H, D = 8, 4, 2, 8
POOL_BYTES = NB * BS * H * D * 4


def _write(kv: torch.Tensor, x: torch.Tensor, blocks: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    k, v = kv[:, 0], kv[:, 1]
    k[blocks, offs] = x
    v[blocks, offs] = x
    return k[blocks].sum() + v[blocks].sum()


def _read(kv: torch.Tensor, x: torch.Tensor, blocks: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return kv[:, 0][blocks, offs].sum() + kv[:, 1][blocks, offs].sum() + x.sum()


def _run(step, named: torch.Tensor | None = None) -> tuple[CloneReport, list[str]]:
    kv = torch.zeros(NB, 2, BS, H, D)
    base = kv if named is None else named
    check = CloneCheck(pools={"layer0.k": base[:, 0], "layer0.v": base[:, 1]})
    args = (kv, torch.randn(3, H, D), torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2]))

    def run() -> None:
        with check:
            check.compile(step)(*args)

    _, codes = run_and_get_code(run)
    assert check.report is not None
    return check.report, codes


def test_the_halves_of_a_whole_cache_input_are_received_and_their_copies_agree_with_the_code() -> None:
    report, codes = _run(_write)
    assert report.errors == [] and report.unreceived_pools == []
    truth = [b for code in codes for b in pool_sized_allocations(code, POOL_BYTES)]
    assert truth == [POOL_BYTES, POOL_BYTES]  # one half-sized buffer per index_put
    assert sorted((c.pool, c.nbytes, c.calls) for c in report.clones) == [
        ("layer0.k", POOL_BYTES, 1),
        ("layer0.v", POOL_BYTES, 1),
    ]
    assert report.other_clones == []  # was: the whole cache's bytes, matching no pool


def test_the_read_only_twin_is_received_and_clean() -> None:
    report, codes = _run(_read)
    assert [b for code in codes for b in pool_sized_allocations(code, POOL_BYTES)] == []
    assert report.check_passed and report.unreceived_pools == []


def test_pools_of_another_tensor_are_never_received() -> None:
    report, _ = _run(_read, named=torch.zeros(NB, 2, BS, H, D))
    assert report.unreceived_pools == ["layer0.k", "layer0.v"] and not report.check_passed
