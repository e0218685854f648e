"""Bytes per call as each call ran: one compiled graph serving several pools is charged, on each call,
only the copy of the pool that call received, at that call's sizes.

Truth: the pool-sized buffers in the generated code of the compile (caches off), evaluated at the sizes
each call ran (a symbolic graph's allocation is checked against the static compile of each size). The
negative control is the clean twin of each loop (no copy: 0 bytes per call and per run).
"""

from __future__ import annotations

import pytest
import torch
from _checks import pool_sized_allocations
from _soundness_steps import D, H, op_commit_after_gather, op_commit_late_read
from torch._inductor.utils import run_and_get_code

from compile_checks.api import CloneCheck
from compile_checks.check.findings import CloneReport
from compile_checks.explain.dumps import render_index
from compile_checks.reports.accounting import bytes_per_run, node_costs
from compile_checks.verdict import bytes_per_call, copy_fields

pytestmark = pytest.mark.compile


def _loop(step, calls, pools, **compile_kw) -> tuple[CloneReport, list[str]]:
    """A full check of ``step`` run once per argument tuple, and the generated code of its compiles."""
    check = CloneCheck(pools=pools)

    def run() -> None:
        with check:
            compiled = check.compile(step, **compile_kw)
            for args in calls:
                compiled(*args)

    _, codes = run_and_get_code(run)
    assert check.report is not None and check.report.errors == []
    return check.report, codes


def _layers(step, n: int = 64) -> tuple[CloneReport, list[str], int]:
    """Three fused ``(2, n, H, D)`` layers, one compiled graph called once per layer."""
    kvs = [torch.zeros(2, n, H, D) for _ in range(3)]
    pools = {f"layer{i}.{c}": kv[j] for i, kv in enumerate(kvs) for j, c in enumerate("kv")}
    x, slots, window = torch.randn(4, H, D), torch.arange(n - 4, n), torch.arange(0, 8)
    report, codes = _loop(step, [(kv[0], kv[1], x, slots, window) for kv in kvs], pools, dynamic=False)
    return report, codes, kvs[0].nbytes


def test_a_graph_called_once_per_layer_is_charged_one_layer_per_call() -> None:
    report, codes, fused_bytes = _layers(op_commit_late_read)
    (per_call,) = [pool_sized_allocations(code, fused_bytes) for code in codes]  # one graph
    assert per_call == [fused_bytes]  # the truth: one whole-storage buffer per call
    assert report.region_calls == {0: 3}
    assert sorted((c.pool, c.nbytes, c.calls) for c in report.clones) == [
        (f"layer{i}.v", fused_bytes, 1) for i in range(3)
    ]
    assert report.clone_bytes == fused_bytes  # was 3x: every pool's entry charged on every call
    assert report.clone_bytes_per_run == 3 * fused_bytes
    assert bytes_per_call([copy_fields(c) for c in report.clones]) == f"{fused_bytes} B/call"
    # the traffic report: copy-in plus copy-back of one layer per call, 3 calls
    written = report.clones[0].written_bytes
    assert bytes_per_run(node_costs("layers", report)) == 3 * 2 * (fused_bytes + written)
    index = render_index(report, "/nonexistent")
    assert f"{fused_bytes} B/call" in index and f"{3 * fused_bytes} bytes over this run" in index
    assert index.count("on 1 call(s)") == 3


def test_the_clean_twin_of_the_layer_loop_costs_nothing() -> None:
    """Negative control: split pools, both window reads feeding the write: no copy, no bytes."""
    layers = [(torch.zeros(64, H, D), torch.zeros(64, H, D)) for _ in range(3)]
    pools = {f"layer{i}.{c}": t for i, kv in enumerate(layers) for c, t in zip("kv", kv)}
    x, slots, window = torch.randn(4, H, D), torch.arange(60, 64), torch.arange(0, 8)
    report, codes = _loop(op_commit_after_gather, [(k, v, x, slots, window) for k, v in layers], pools)
    assert [pool_sized_allocations(code, 64 * H * D * 4) for code in codes] == [[]]
    assert report.clean and report.clone_bytes == 0 and report.clone_bytes_per_run == 0


SIZES = (48, 56, 64)


def test_a_symbolic_graph_charges_each_call_its_own_size() -> None:
    pairs = [(torch.zeros(n, H, D), torch.zeros(n, H, D)) for n in SIZES]
    pools = {f"p{n}.{c}": t for (k, v), n in zip(pairs, SIZES) for c, t in zip("kv", (k, v))}
    x, window = torch.randn(4, H, D), torch.arange(0, 8)
    calls = [(k, v, x, torch.arange(k.shape[0] - 4, k.shape[0]), window) for k, v in pairs]
    report, codes = _loop(op_commit_late_read, calls, pools, dynamic=True)
    assert len(codes) == 1 and report.region_calls == {0: 3}  # one symbolic graph served all three
    # the truth at each call's size: the static compile of that size allocates the V pool once
    truth = []
    for (k, v), n, args in zip(pairs, SIZES, calls):
        _, static_codes = _loop(op_commit_late_read, [args], {"k": k, "v": v}, dynamic=False)
        (buffers,) = [pool_sized_allocations(code, n * H * D * 4) for code in static_codes]
        truth.append(buffers)
    assert truth == [[n * H * D * 4] for n in SIZES]
    got = sorted((c.pool, c.nbytes, c.calls) for c in report.clones)
    assert got == [(f"p{n}.v", n * H * D * 4, 1) for n in SIZES]
    assert report.clone_bytes_per_run == sum(n * H * D * 4 for n in SIZES)  # 3072 + 3584 + 4096
    assert bytes_per_call([copy_fields(c) for c in report.clones]) == "3072 to 4096 B/call"


def test_one_storage_serving_two_layers_is_charged_once_per_call() -> None:
    """A fused paged layout: both layers' K and V in one ``(layers, 2, n, H, D)`` storage, one graph called
    once per layer. The copy is of one layer's fused K/V on each call, never once per named pool."""
    n = 64
    kv = torch.zeros(2, 2, n, H, D)
    pools = {f"layer{i}.{c}": kv[i, j] for i in range(2) for j, c in enumerate("kv")}
    x, slots, window = torch.randn(4, H, D), torch.arange(n - 4, n), torch.arange(0, 8)
    calls = [(kv[i, 0], kv[i, 1], x, slots, window) for i in range(2)]
    report, codes = _loop(op_commit_late_read, calls, pools, dynamic=False)
    layer_bytes = kv[0].nbytes
    (per_call,) = [[b for b in pool_sized_allocations(code, layer_bytes) if b >= layer_bytes] for code in codes]
    assert len(per_call) == 1  # the truth: one buffer per call
    assert report.clone_bytes == per_call[0] and report.clone_bytes_per_run == 2 * per_call[0]
    assert sorted((c.pool, c.calls) for c in report.clones) == [("layer0.v", 1), ("layer1.v", 1)]
