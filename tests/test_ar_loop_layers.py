"""Issue 16 item 4: one region reused for every layer of a cross-layer KV allocation.

vLLM's cross-layer layout keeps every layer in one tensor (``big[layer]`` views); the engine
compiles the step once and calls it for each layer. Inductor makes explicit ``as_strided``
offsets into a graph input relative to that input, so each call copies *its* layer. The
check used to take the clone's offset from compile time (every copy on layer 0) and, in
analysis-only mode, ran the post-grad graph with absolute offsets (layers 1-3 got layer 0's
data). Both are held to the code plain Inductor generates and to an eager run.
"""

from __future__ import annotations

import pytest
import torch
import torch.fx
from _ar_loop_steps import (
    D,
    H,
    N,
    evict_gather_commit,
    evict_gather_commit_late,
    gather_commit_late,
    generated_copies,
    step_args,
)

from compile_checks.api import CloneCheck, analyze_pool_clones
from compile_checks.check.graph.input_offsets import rebase_input_offsets

pytestmark = pytest.mark.compile

LAYERS = 4


def _loop(fn, mode: str) -> tuple[torch.Tensor, object]:
    """Run ``fn`` once per layer on ``big[layer]`` views: eagerly, or under the check ("full" /
    "analysis"). Returns (the cross-layer tensor afterwards, the report or None)."""
    torch.manual_seed(0)
    big = torch.randn(LAYERS, 2, N, H, D)
    per_layer = [step_args() for _ in range(LAYERS)]
    if mode == "eager":
        for layer, args in enumerate(per_layer):
            fn(big[layer, 0], big[layer, 1], *args)
        return big, None
    pools = {f"layer{layer}.{n}": big[layer, i] for layer in range(LAYERS) for i, n in enumerate("kv")}
    check = CloneCheck(pools=pools, analysis_only=mode == "analysis")
    with check:
        step = check.compile(fn)
        for layer, args in enumerate(per_layer):
            step(big[layer, 0], big[layer, 1], *args)
    return big, check.report


def _truth(fn) -> list[int]:
    torch.manual_seed(0)
    big = torch.randn(LAYERS, 2, N, H, D)
    per_layer = [step_args() for _ in range(LAYERS)]

    def run(compiled):
        for layer, args in enumerate(per_layer):
            compiled(big[layer, 0], big[layer, 1], *args)

    return generated_copies(fn, run, "v2", pool_bytes=N * H * D * 4)


@pytest.mark.parametrize("mode", ["full", "analysis"])
def test_each_layer_gets_its_own_copy(mode: str) -> None:
    """One compiled region, four calls: one copy of each layer's V, each the size of the
    buffer the generated code allocates per call."""
    eager, _ = _loop(gather_commit_late, "eager")
    big, report = _loop(gather_commit_late, mode)
    assert report.num_regions == 1 and report.region_calls == {0: LAYERS}
    truth = _truth(gather_commit_late)
    assert len(truth) == 1  # one pool-sized buffer per call of the region
    assert sorted((c.pool, c.nbytes) for c in report.clones) == [(f"layer{i}.v", truth[0]) for i in range(LAYERS)]
    assert report.other_clones == [] and report.errors == []
    # the pools are right in both modes: analysis-only runs with the compiled code's offsets
    assert torch.allclose(big, eager, atol=1e-5)


@pytest.mark.parametrize("mode", ["full", "analysis"])
def test_clean_twin_reuses_the_region_without_a_copy(mode: str) -> None:
    eager, _ = _loop(evict_gather_commit, "eager")
    big, report = _loop(evict_gather_commit, mode)
    assert report.region_calls == {0: LAYERS} and report.check_passed
    assert _truth(evict_gather_commit) == []
    assert torch.allclose(big, eager, atol=1e-5)


def _offset_graph() -> torch.fx.GraphModule:
    """``out = clone(as_strided(x, [4], [1], 4))``: as traced on a view ``x`` at storage offset 4."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(8).as_strided([4], [1], 4)
    view = g.call_function(torch.ops.aten.as_strided.default, (x, [4], [1], 4))
    g.output(g.call_function(torch.ops.aten.clone.default, (view,)))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_eager_run_of_a_graph_uses_inductors_offsets() -> None:
    """Called on another view of the same storage (offset 12), the graph traced at offset 4
    must read that view (Inductor's semantics), not offset 4 (eager as_strided's)."""
    storage = torch.arange(16.0)
    gm = _offset_graph()
    rebased, n = rebase_input_offsets(gm)
    assert n == 1
    assert torch.equal(rebased(storage[12:16]), storage[12:16])
    # the bug: run as traced, it reads the compile-time layer's bytes
    assert torch.equal(gm(storage[12:16]), storage[4:8])
    # called where it was traced, both agree
    assert torch.equal(rebased(storage[4:8]), gm(storage[4:8]))


def _fused(fn, functionalization: str, compiled: bool = False):
    torch.manual_seed(0)
    kv = torch.randn(2, N, H, D)
    args = step_args()
    if compiled:
        torch._dynamo.reset()
        import torch._inductor.config as inductor_config

        with inductor_config.patch(force_disable_caches=True, enable_auto_functionalized_v2=functionalization == "v2"):
            torch.compile(fn)(kv[0], kv[1], *args)
        torch._dynamo.reset()
        return kv
    report = analyze_pool_clones(
        fn, kv[0], kv[1], *args, pools={"k": kv[0], "v": kv[1]}, analysis_only=True, functionalization=functionalization
    )
    return report


@pytest.mark.parametrize("functionalization", ["v2", "v1"])
def test_a_write_back_from_the_wrong_bytes_is_a_check_error(functionalization: str) -> None:
    """Evict + late-read commit on a fused ``(2, N, H, D)`` pool: Inductor's decomposition clones V
    from a stale offset-0 geometry (K's bytes) and copies that into V. Truth: plain torch.compile
    differs from eager on V (and only V)."""
    report = _fused(evict_gather_commit_late, functionalization)
    assert [e for e in report.errors if "comes from clone" in e and "compiled != eager" in e]
    assert not report.check_passed
    torch.manual_seed(0)
    eager = torch.randn(2, N, H, D)
    evict_gather_commit_late(eager[0], eager[1], *step_args())
    compiled = _fused(evict_gather_commit_late, functionalization, compiled=True)
    assert torch.allclose(compiled[0], eager[0], atol=1e-5) and not torch.allclose(compiled[1], eager[1], atol=1e-5)


def test_its_clean_twin_has_no_such_error() -> None:
    """Twin: the same pools, both window reads feeding the write (no clone, nothing written back)."""
    report = _fused(evict_gather_commit, "v2")
    assert report.errors == [] and report.check_passed
