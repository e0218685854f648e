"""The full mode scans every compiled call for writes eager did not make: a miscompile that starts at call 2.

torch 2.14, ``dynamic=True``, K and V as ``kv[0]`` / ``kv[1]`` of one allocation, a custom op declaring
writes of both: Inductor clones the allocation for ``v`` and hands the op ``reinterpret_tensor(buf, ...,
0)``, so from the region's second call on the compiled run also writes V rows the eager graph did not (the
previous call's slots), while every element the eager graph wrote comes out right. Only a scan of the pool
sees it; analysis-only scans a region's first call (its post-grad graph runs the op on the right views,
so it has nothing to find), ``--full`` scans every call and fails naming pool, call and positions. The
negative control: K and V as two allocations, the same rollout in the full mode, passes.
"""

from __future__ import annotations

import _writes_call_ops  # noqa: F401  # registers w39_tests::kv_write
import pytest
import torch

from compile_checks import Case, run_case
from compile_checks.vocab import WriteProblem

pytestmark = pytest.mark.compile

SLOTS, HEADS, HEAD_DIM, CALLS = 64, 2, 8, 4


def step(k: torch.Tensor, v: torch.Tensor, new_k: torch.Tensor, new_v: torch.Tensor, slots: torch.Tensor):  # type: ignore[no-untyped-def]
    torch.ops.w39_tests.kv_write(k, v, new_k, new_v, slots)
    return (k[slots] * v[slots]).sum()


def _case(*, fused: bool) -> Case:
    if fused:
        kv = torch.zeros(2, SLOTS, HEADS, HEAD_DIM)
        k, v = kv[0], kv[1]
    else:
        k, v = torch.zeros(SLOTS, HEADS, HEAD_DIM), torch.zeros(SLOTS, HEADS, HEAD_DIM)
    new = torch.randn(CALLS, 2, 4, HEADS, HEAD_DIM, generator=torch.Generator().manual_seed(0))

    def driver(compiled):  # type: ignore[no-untyped-def]
        # fresh chunks (storage offset 0): one region serves every call
        return [compiled(k, v, new[i, 0].clone(), new[i, 1].clone(), torch.arange(4) + 4 * i) for i in range(CALLS)]

    return Case("fused" if fused else "split", step, pools={"k": k, "v": v}, driver=driver, dynamic=True)


def test_full_mode_scans_every_call() -> None:
    result = run_case(_case(fused=True), analysis_only=False)
    assert result.report.region_calls == {0: CALLS}, result.report.region_calls  # one region: call 1 is its scan
    (finding,) = [f for f in result.report.run_findings if f.fails]
    assert finding.kind == WriteProblem.LOST_WRITE and finding.pool == "v", finding
    assert finding.details["calls"] == [2, 3, 4] and finding.details["of_calls"] == CALLS
    assert finding.details["compiled_only"]["0"] == [0, 1, 2, 3]  # call 2 wrote V's rows of call 1's slots
    assert "written only by the compiled run at dim 0 [0-3]" in finding.message and not result.passed


def test_split_pools_pass_the_full_scan() -> None:
    result = run_case(_case(fused=False), analysis_only=False)
    assert result.passed and not result.report.run_findings, result.failure_reasons()
