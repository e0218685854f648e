"""End to end: compile with Inductor, find (or not) the surviving pool clones.

The per-scenario verdicts run the full loop with ``analysis_only=True``: dynamo, AOT and
Inductor's post-grad passes (reinplace + decomposition, where the verdict is made) run, and the
post-grad FX graph itself is executed instead of lowering it to C++ (about 1 s per scenario instead
of 10-20 s). Full compiles: the library tests, the full ``fused`` run, the agreement test, the CLI.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from _checks import scenario_analysis

import ar_paging
from compile_checks import (
    CompileCheckError,
    analyze_pool_clones,
    assert_no_pool_clones,
    find_pool_clones,
)
from compile_checks.case import CaseResult, run_case
from compile_checks.reports.accounting import clone_only_bytes_per_run, node_costs
from compile_checks.scenarios import (
    DEFAULT_GATE,
    DEFAULT_GATE_CLEAN,
    DEFAULT_GATE_NEGATIVE,
    SCENARIOS,
    Scenario,
    scenario_case,
)

pytestmark = pytest.mark.compile

N, H, D = 256, 2, 16


def step(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, slots: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """Read a window, commit a chunk: the smallest region with the paged write.

    Both window reads feed the write, so no pass can sink them below it.
    """
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2 + vw.mean(0), x + kw.mean(0), slots)
    return kw.sum() + vw.sum()


def step_late_read(
    k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, slots: torch.Tensor, window: torch.Tensor
) -> torch.Tensor:
    """The V window is only consumed after the write: Inductor may sink its gather below the commit."""
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2, x + kw.mean(0), slots)
    return kw.sum() + vw.sum()


def _args(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x = torch.randn(16, H, D)
    return (k, v, x, torch.arange(32, 48), torch.arange(0, 32))


def test_fused_views_leave_a_clone_of_the_whole_storage_for_v_pool(tmp_path: Path) -> None:
    kv = torch.zeros(2, N, H, D)
    k, v = kv[0], kv[1]
    report = analyze_pool_clones(step, *_args(k, v), pools={"layer0.k": k, "layer0.v": v}, dump_dir=tmp_path)
    assert len(report.clones) == 1
    c = report.clones[0]
    assert (c.op, c.arg, c.pool, c.layer) == ("ar_paging::paged_write", "v_pool", "layer0.v", 0)
    assert c.nbytes == 2 * N * H * D * 4 and c.shape == (2 * N * H * D,) and c.dtype == torch.float32
    # the file:line points at the clone's line in depyf's post-grad dump
    assert c.graph_file is not None and c.line is not None
    line = Path(c.graph_file).read_text().splitlines()[c.line - 1]
    assert c.node in line and "aten.clone" in line and "AFTER_POST_GRAD" in c.graph_file
    recs = {(m.arg, m.pool, m.reinplaced) for m in report.mutated_args}
    assert recs == {("k_pool", "layer0.k", True), ("v_pool", "layer0.v", False)}
    assert report.region_calls == {0: 1} and report.region_kernel_bytes[0] > 0
    # the pools were really written, through the compiled code
    assert float(v[32:48].abs().sum()) > 0 and float(k[32:48].abs().sum()) > 0
    index = (tmp_path / "index.md").read_text()
    assert "CLONED" in index and "clone_default" in index and "AFTER_POST_GRAD" in index


def test_split_pools_are_clean_and_assert_passes() -> None:
    k, v = torch.zeros(N, H, D), torch.zeros(N, H, D)
    report = assert_no_pool_clones(step, *_args(k, v), pools={"layer0.k": k, "layer0.v": v}, functionalization="v1")
    assert report.clean and {(m.arg, m.reinplaced) for m in report.mutated_args} == {("k_pool", True), ("v_pool", True)}
    assert isinstance(report.output, torch.Tensor)


def test_assert_message_names_op_arg_pool_bytes_and_dump_line(tmp_path: Path) -> None:
    kv = torch.zeros(2, N, H, D)
    k, v = kv[0], kv[1]
    with pytest.raises(AssertionError) as err:
        assert_no_pool_clones(step, *_args(k, v), pools={"layer5.k": k, "layer5.v": v}, dump_dir=tmp_path)
    msg = str(err.value)
    assert "ar_paging::paged_write" in msg and "'v_pool'" in msg and "layer5.v" in msg
    assert str(2 * N * H * D * 4) in msg and "AFTER_POST_GRAD.0.py:" in msg and str(tmp_path) in msg


def test_read_consumed_after_the_write_is_sunk_below_it_and_forces_a_clone() -> None:
    """reorder_for_locality runs before reinplacing and moves the V gather next to its consumer,
    after the commit; reinplace then must keep a clone of v_pool. Off, the same code is clean."""
    k, v = torch.zeros(N, H, D), torch.zeros(N, H, D)
    pools = {"layer0.k": k, "layer0.v": v}
    clones = find_pool_clones(step_late_read, *_args(k, v), pools=pools)
    assert [(c.arg, c.pool, c.nbytes) for c in clones] == [("v_pool", "layer0.v", N * H * D * 4)]
    assert (
        find_pool_clones(step_late_read, *_args(k, v), pools=pools, inductor_config={"reorder_for_locality": False})
        == []
    )


def test_users_own_clone_of_a_pool_is_not_reported() -> None:
    """``tmp = k.clone()`` then mutating tmp is the user's copy, not a functionalization clone."""

    def own_copy(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        tmp_k, tmp_v = k.clone(), v.clone()
        torch.ops.ar_paging.paged_write(tmp_k, tmp_v, x, x, slots)
        return tmp_k.sum() + tmp_v.sum()

    k, v = torch.zeros(N, H, D), torch.zeros(N, H, D)
    assert find_pool_clones(own_copy, k, v, torch.randn(16, H, D), torch.arange(16), pools={"k": k, "v": v}) == []


def test_compile_failure_is_a_compile_check_error_with_the_cause() -> None:
    def bad(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> None:
        torch.ops.ar_paging.paged_write(k, v, x, x, torch.arange(3))  # 3 slots for 16 tokens

    k, v = torch.zeros(N, H, D), torch.zeros(N, H, D)
    with pytest.raises(CompileCheckError) as err:
        analyze_pool_clones(bad, k, v, torch.randn(16, H, D))
    assert "slot_mapping" in str(err.value) and err.value.__cause__ is not None


def _run_scenario(s: Scenario, analysis_only: bool = False) -> CaseResult:
    """The scenario through run_case: the path every case takes."""
    return run_case(scenario_case(s), analysis_only=analysis_only)


def test_fused_scenario_full_run_flags_every_layers_v_pool() -> None:
    s = SCENARIOS["fused"]
    r = scenario_analysis(s.name)
    assert not r.check_passed and r.passed and r.eager_match
    assert sorted(c.pool for c in r.report.clones) == [f"layer{i}.v" for i in range(s.num_layers)]
    assert all(c.arg == "v_pool" and c.nbytes == 2 * s.pool_bytes for c in r.report.clones)
    # commit graph runs once per layer per chunk; the non-commit graph (denoise_steps - 1) times as often
    commit_region = r.report.clones[0].region
    assert r.report.region_calls[commit_region] == s.num_chunks * s.num_regions_per_step
    assert sum(r.report.region_calls.values()) == s.num_chunks * s.denoise_steps * s.num_regions_per_step
    assert r.output.num_steps == s.num_chunks * s.denoise_steps and r.output.evicted_blocks >= 1
    assert s.ideal_write_bytes == 2 * s.num_layers * s.num_chunks * s.chunk_size * s.hidden * 4
    # the copy-in of each clone (read + write of the whole fused storage) every time the commit graph runs
    copy_in = clone_only_bytes_per_run(node_costs(s.name, r.report))
    assert copy_in == 2 * 2 * s.pool_bytes * r.report.region_calls[commit_region]


# ATen-write commits (index_put) have no auto_functionalized op: tests/test_scenarios_cases.py
@pytest.mark.parametrize("name", [n for n, s in SCENARIOS.items() if s.commit_op == "paged_write"])
def test_scenario_verdict(name: str) -> None:
    """Every scenario, full loop, analysis-only (Inductor stops after its post-grad passes)."""
    s = SCENARIOS[name]
    r = scenario_analysis(name)
    assert r.passed, f"{name}: expected clean={s.expect_clean}, got clones {[(c.arg, c.pool) for c in r.report.clones]}"
    assert r.eager_match, f"{name}: compiled differs from eager by {r.max_abs_diff}"
    assert r.output.num_steps == s.num_chunks * s.denoise_steps and r.output.evicted_blocks >= 1
    mutated = {(m.arg, m.pool) for m in r.report.mutated_args}
    assert mutated == {(a, f"layer{i}.{a[0]}") for i in range(s.num_layers) for a in ("k_pool", "v_pool")}
    cloned = {(m.arg, m.pool) for m in r.report.mutated_args if not m.reinplaced}
    assert cloned == {(c.arg, c.pool) for c in r.report.clones}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fused", "read_after_write_no_reorder"])
def test_full_inductor_compile_gives_the_analysis_only_verdict(name: str) -> None:
    """The fast mode used above must agree with a real compile (commit graph only, to stay short)."""
    s = dataclasses.replace(SCENARIOS[name], denoise_steps=1)
    full = _run_scenario(s)
    fast = _run_scenario(s, analysis_only=True)
    key = lambda r: sorted((c.arg, c.pool, c.nbytes) for c in r.report.clones)  # noqa: E731
    assert key(full) == key(fast) and full.passed and full.eager_match
    assert all(b > 0 for b in full.report.region_kernel_bytes.values())


def test_gate_holds_clean_shapes_and_negative_controls() -> None:
    assert set(DEFAULT_GATE) == set(DEFAULT_GATE_CLEAN) | set(DEFAULT_GATE_NEGATIVE)
    assert all(SCENARIOS[n].expect_clean for n in DEFAULT_GATE_CLEAN)
    assert not any(SCENARIOS[n].expect_clean for n in DEFAULT_GATE_NEGATIVE) and "fused" in DEFAULT_GATE_NEGATIVE
