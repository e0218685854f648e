"""Built-in scenarios as Cases: construction, names, pipelines, and the new scenarios' verdicts.

Verdicts here are analysis-only (Inductor stops after its post-grad passes); the generated
code that backs each verdict is checked in test_scenarios_generated_code.py.
"""

from __future__ import annotations

import dataclasses

import pytest
from _checks import check_rejects, scenario_analysis

from compile_checks.case import Case, CaseResult
from compile_checks.pipelines import resolve
from compile_checks.reports.accounting import bytes_per_run, node_costs
from compile_checks.scenarios import (
    DEFAULT_GATE,
    DEFAULT_GATE_CLEAN,
    DEFAULT_GATE_NEGATIVE,
    FULL_COMPILE_SMOKE,
    SCENARIOS,
    Scenario,
    builtin_cases,
    scenario_case,
)
from compile_checks.scenarios.host_loop import RunStats

# ------------------------------------------------------------------------------------------
# construction (no compile)
# ------------------------------------------------------------------------------------------


def test_scenario_case_carries_the_scenario_pools_and_expectation() -> None:
    s = SCENARIOS["fused_kv_v1"]
    case = scenario_case("fused_kv_v1")
    assert isinstance(case, Case) and case.name == "fused_kv_v1" and case.pipeline == "stock"
    assert case.meta["scenario"] is s and case.expect_clean is False
    assert case.functionalization == "v1" and case.dynamic is False and case.driver is not None
    assert case.verify is not None and case.description == s.description
    model = case.meta["model"]
    assert set(case.pools) == {f"layer{i}.{kv}" for i in range(s.num_layers) for kv in "kv"}
    assert all(case.pools[f"layer{i}.k"] is model.k_pools[i] for i in range(s.num_layers))
    # fused_kv: K and V are two views of one (2, N, H, D) allocation per layer
    assert case.pools["layer0.k"].untyped_storage().data_ptr() == case.pools["layer0.v"].untyped_storage().data_ptr()


def test_functionalization_none_takes_the_pipelines_and_pins_are_kept() -> None:
    assert SCENARIOS["split"].functionalization is None
    assert scenario_case("split").functionalization is None
    assert scenario_case("split", pipeline="vllm").functionalization is None  # vllm's default (v1) applies
    assert scenario_case("fused_kv").functionalization == "v2"
    assert scenario_case("split_v1", pipeline="vllm").functionalization == "v1"


def test_scenario_case_accepts_a_scenario_object_and_its_overrides() -> None:
    s = dataclasses.replace(SCENARIOS["dynamic"], name="my_dyn", inductor_config=(("reorder_for_locality", False),))
    case = scenario_case(s)
    assert case.name == "my_dyn" and case.dynamic is True
    assert dict(case.inductor_config) == {"reorder_for_locality": False}


def test_ideal_bytes_per_call_comes_from_the_window_model() -> None:
    s = SCENARIOS["split"]  # 4 chunks, 1 sink + 1 window chunk: resident chunks 0, 1, 2, 2
    token = s.num_kv_heads * s.head_dim * 4
    reads = 2 * s.num_layers * s.denoise_steps * (0 + 1 + 2 + 2) * s.chunk_size * token
    writes = 2 * s.num_layers * s.num_chunks * s.chunk_size * token
    calls = s.num_chunks * s.denoise_steps * s.num_regions_per_step
    assert scenario_case(s).ideal_bytes_per_call == (reads + writes) // calls == s.ideal_bytes_per_call


def test_builtin_cases_default_is_the_gate_on_both_pipelines() -> None:
    cases = builtin_cases()
    # the scenarios on both pipelines, then vLLM's own wrapper around a layer (clean, and its fused control)
    assert [c.name for c in cases] == [n for g in DEFAULT_GATE for n in (g, f"{g}[vllm]")] + [
        "vllm_module_split[vllm]",
        "vllm_module_fused[vllm]",
    ]
    assert {c.pipeline for c in cases} == {"stock", "vllm"}
    by_name = {c.name: c for c in cases}
    assert by_name["split[vllm]"].meta["scenario"] is SCENARIOS["split"]
    assert by_name["fused[vllm]"].expect_clean is False and by_name["commit_before[vllm]"].expect_clean is True
    assert by_name["vllm_module_fused[vllm]"].expect_clean is False
    # every case owns its pools: running split must not write split[vllm]'s
    assert by_name["split"].pools["layer0.k"] is not by_name["split[vllm]"].pools["layer0.k"]


def test_builtin_cases_names_and_pipelines() -> None:
    cases = builtin_cases(["fused_kv", "index_put_commit_last"], pipelines=("stock",))
    assert [c.name for c in cases] == ["fused_kv", "index_put_commit_last"]
    assert [c.name for c in builtin_cases(["split"], pipelines=("vllm-piecewise",))] == ["split[vllm-piecewise]"]


def test_gate_sets() -> None:
    assert DEFAULT_GATE == DEFAULT_GATE_CLEAN + DEFAULT_GATE_NEGATIVE
    assert all(SCENARIOS[n].expect_clean for n in DEFAULT_GATE_CLEAN)
    assert not any(SCENARIOS[n].expect_clean for n in DEFAULT_GATE_NEGATIVE)
    assert {"fused_kv_v1", "attn_op_commit_after", "index_put_commit"} <= set(DEFAULT_GATE_NEGATIVE)
    assert {"commit_before", "commit_before_per_layer"} <= set(DEFAULT_GATE_CLEAN)
    assert FULL_COMPILE_SMOKE == ("fused",)  # one small graph, the negative control (scenarios.declared)


def test_bad_arguments_are_value_errors_naming_them() -> None:
    check_rejects(lambda: scenario_case("no_such"), "name_or_scenario.*no_such")
    check_rejects(lambda: scenario_case("split", pipeline="tensorrt"), "pipeline")
    check_rejects(lambda: scenario_case(3), "name_or_scenario")  # type: ignore[arg-type]
    check_rejects(lambda: builtin_cases(["split", "nope"]), "names.*nope")
    check_rejects(lambda: builtin_cases("split"), "names")
    check_rejects(lambda: builtin_cases(pipelines=("stock", "jax")), "pipelines")
    check_rejects(lambda: builtin_cases(pipelines="stock"), "pipelines")
    check_rejects(lambda: Scenario("x", commit_order="sometime"), "commit_order")
    check_rejects(lambda: Scenario("x", commit_op="scatter"), "commit_op")
    check_rejects(lambda: Scenario("x", attention="flash"), "attention")
    check_rejects(lambda: Scenario("x", functionalization="v3"), "functionalization")
    check_rejects(lambda: Scenario("x", read_after_write=True, commit_order="after_attention"), "read_after_write")


# ------------------------------------------------------------------------------------------
# verdicts of the new scenarios (analysis-only, full host loop)
# ------------------------------------------------------------------------------------------


def _cloned(r: CaseResult) -> set[str]:
    return {c.pool for c in r.report.clones}


def _all_pools(name: str) -> set[str]:
    return {f"layer{i}.{kv}" for i in range(SCENARIOS[name].num_layers) for kv in "kv"}


@pytest.mark.parametrize("name", ["fused_kv_v1", "attn_op_commit_after"])
def test_negative_control_clones_k_and_v_of_every_layer(name: str) -> None:
    r = scenario_analysis(name)
    assert not r.check_passed and r.passed and r.eager_match, r.notes
    assert _cloned(r) == _all_pools(name)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "fused_kv",
        "attn_op_commit_last",
        "commit_before",
        "commit_before_per_layer",
        "commit_before_attn_op",
        "index_put_commit_last",
    ],
)
def test_clean_twin_keeps_no_pool_copy(name: str) -> None:
    r = scenario_analysis(name)
    assert r.check_passed and r.passed and r.eager_match, [(c.arg, c.pool) for c in r.report.clones]


def test_commit_before_writes_every_step_and_reads_the_chunk_back_in_place() -> None:
    """The recommended shape: every layer's pools are mutated and all of them re-inplaced."""
    r = scenario_analysis("commit_before")
    assert {m.pool for m in r.report.mutated_args} == _all_pools("commit_before")
    assert all(m.reinplaced for m in r.report.mutated_args)


def test_index_put_commit_is_caught() -> None:
    """Negative control: the generated code copies both pools (test_scenarios_generated_code.py)."""
    r = scenario_analysis("index_put_commit")
    assert not r.check_passed and r.passed


def test_index_put_commit_runs_and_matches_eager() -> None:
    """The ATen commit's copies are a cost, not a wrong answer: the run matches eager."""
    r = scenario_analysis("index_put_commit")
    assert r.eager_match and r.case.expect_clean is False
    assert {c.kind for c in r.report.clones} == {"aten_write_copy"}


# ------------------------------------------------------------------------------------------
# a scenario runs through run_case like any case; its host loop's accounting is the output
# ------------------------------------------------------------------------------------------


def test_scenario_case_runs_through_run_case_with_its_host_loops_accounting() -> None:
    s = SCENARIOS["attn_op_commit_after"]
    r = scenario_analysis(s.name)
    stats = r.output
    assert isinstance(r, CaseResult) and isinstance(stats, RunStats) and r.report.output is stats
    assert r.case.meta["scenario"] is s and r.analysis_only
    assert r.passed and not r.check_passed and r.eager_match
    assert resolve(r.case).functionalization == "v2" and r.case.name == s.name  # resolved from the pipeline
    assert stats.num_steps == s.num_chunks * s.denoise_steps and stats.evicted_blocks >= 1
    assert 2 * s.num_layers * stats.resident_tokens_read * s.token_bytes == s.ideal_read_bytes
    calls = sum(r.report.region_calls.values())
    assert calls == s.num_region_calls
    assert (s.ideal_read_bytes + s.ideal_write_bytes) // calls == r.case.ideal_bytes_per_call
    assert bytes_per_run(node_costs(s.name, r.report)) > 0
