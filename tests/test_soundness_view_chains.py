"""Property: for any chain of views of a pool written through (reshape, unsqueeze, dtype view, transpose,
narrow, as_strided, select), with or without a read of the old pool, the check's copies are the generated
code's buffers, count and bytes, in both modes (analysis-only settles Inductor's buffer choices from the code
it has generated for the graph that holds one), and none is left undecided.

Oracle: the buffers Inductor's generated code allocates (caches off), every one but the scalar reads'.
Few derandomized examples (each is one compile). Negative control: a chain whose copies the check is told
to ignore fails the same comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
from _checks import allocated_buffers
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch._inductor.utils import run_and_get_code

from compile_checks.api import CloneCheck
from compile_checks.check.findings import CloneReport

pytestmark = pytest.mark.compile

POOL = (16, 8, 4)  # 2048 B of float32


def _views(t: torch.Tensor) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The views applicable to ``t`` (each a view of the same storage, never a copy)."""
    out: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "unsqueeze": lambda x: x.unsqueeze(0),
        "as_strided": lambda x: x.as_strided(x.shape, x.stride(), x.storage_offset()),
    }
    if t.shape[0] % 2 == 0:
        out["reshape"] = lambda x: x.view(2, x.shape[0] // 2, *x.shape[1:])
        out["narrow"] = lambda x: x.narrow(0, x.shape[0] // 2, x.shape[0] // 2)
    if t.dim() >= 2:
        out["transpose"] = lambda x: x.transpose(0, 1)
        out["select"] = lambda x: x.select(0, x.shape[0] - 1)
    if t.stride(-1) == 1:
        out["dtype_view"] = lambda x: x.view(torch.int32 if x.dtype == torch.float32 else torch.float32)
    return out


def _apply(chain: Sequence[str], pool: torch.Tensor) -> torch.Tensor:
    t = pool
    for name in chain:
        t = _views(t).get(name, lambda x: x)(t)  # a view that does not apply here is skipped
    return t


def _step(chain: Sequence[str], read_first: bool) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def step(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        before = k[0:2].sum() if read_first else x.sum()  # the read Inductor sinks below the write
        _apply(chain, k).fill_(1)
        return before + x.sum()

    return step


def _buffers(code: str) -> list[int]:
    """Bytes of every non-scalar buffer the code allocates (the reads are sums: scalars)."""
    return allocated_buffers(code)


def _agree(chain: Sequence[str], read_first: bool, ignore: bool = False) -> None:
    """The property for one chain; ``ignore``: the check is told to drop this chain's copies."""
    step = _step(chain, read_first)
    reports: list[CloneReport] = []
    for full in (True, False):
        pool = torch.zeros(POOL)
        check = CloneCheck(pools={"pool": pool}, analysis_only=not full)

        def run(check: CloneCheck = check, pool: torch.Tensor = pool) -> None:
            with check:
                check.compile(step)(pool, torch.ones(3))

        if full:
            _, codes = run_and_get_code(run)
        else:
            run()
        expected = torch.zeros(POOL)
        _apply(chain, expected).fill_(1)
        assert torch.equal(pool, expected)  # the compiled step wrote what eager writes
        assert check.report is not None and check.report.errors == []
        reports.append(check.report)
    full_report, analysis = reports
    truth = [b for code in codes for b in _buffers(code)]
    got = sorted(c.nbytes for c in full_report.clones if not ignore)
    assert got == truth, (chain, read_first, got, truth)
    fast = sorted(c.nbytes for c in analysis.clones if not ignore)
    assert fast == truth and not analysis.undecided, (chain, read_first, fast, truth)


VIEWS = ("reshape", "unsqueeze", "dtype_view", "transpose", "narrow", "as_strided", "select")


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(chain=st.lists(st.sampled_from(VIEWS), min_size=1, max_size=3), read_first=st.booleans())
@example(chain=["select", "narrow"], read_first=True)  # found by this test: a nested scatter read after, a buffer
@example(chain=["reshape", "select", "select"], read_first=False)  # ``k.view(NB, BS, H, D)[b][o] = x``
def test_view_chains_agree_with_the_generated_code(chain: list[str], read_first: bool) -> None:
    _agree(chain, read_first)


def test_a_chain_the_check_is_told_to_ignore_fails_the_property() -> None:
    """Negative control: the reshaped write copies the pool; with its copies ignored the comparison fails."""
    _agree(["reshape", "select", "select"], read_first=False)  # holds: the code allocates the pool once
    with pytest.raises(AssertionError):
        _agree(["reshape", "select", "select"], read_first=False, ignore=True)
