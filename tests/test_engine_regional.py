"""LingBot-like blocks through vLLM-Omni's ``regionally_compile(model, dynamic=True)`` (examples/engine_regional).

Each block's first compile restarts (``TensorifyScalarRestartAnalysis``); the restarted attempt is no
region, so the clean paged layout passes and the fused one fails on exactly its copy: one site per
block call, the whole ``(2, slots, H, D)`` allocation (64 KiB). The fused layout also hits a real
Inductor miscompile under dynamic shapes (the op is handed ``reinterpret_tensor(buf, ..., 0)``: V
written at K's offset of the clone): analysis-only runs the post-grad graph and sees compiled ==
eager, and says so (``eager_compared``); ``--full`` runs the generated code and fails it. Negative
control: the same case analysis-only must not claim to have compared generated code.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from compile_checks import run_case
from compile_checks.gate.outcome import EagerCompared, Outcome
from compile_checks.vocab import WriteProblem

REGIONAL = Path(__file__).resolve().parent.parent / "examples" / "engine_regional"
sys.path.insert(0, str(REGIONAL))

from lingbot_like import LingBotConfig  # noqa: E402


def _load_cases():  # type: ignore[no-untyped-def]
    """examples/engine_regional/cases.py under a name of its own: other examples have a ``cases`` module
    too, and a worker that imported one first would hand this test its ``build_case``."""
    spec = importlib.util.spec_from_file_location("engine_regional_cases", REGIONAL / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_case = _load_cases().build_case

pytestmark = [pytest.mark.compile, pytest.mark.slow]
ONE_CHUNK = LingBotConfig(num_chunks=1)


@pytest.fixture(autouse=True)
def _no_caches() -> None:
    torch._inductor.config.force_disable_caches = True


def _restarted(result) -> bool:  # type: ignore[no-untyped-def]
    return any("TensorifyScalarRestartAnalysis" in n for n in result.report.notes)


def _outcome(result) -> Outcome:  # type: ignore[no-untyped-def]
    """The gate's row for ``result`` (what its table and ``--json`` are written from)."""
    return Outcome(
        "fused_paged", "cases.py:cases/stock", "stock", False, result.analysis_only, eager_match=result.eager_match
    )


@pytest.mark.parametrize("layout", ["split", "stale", "paged"])
def test_clean_layouts_pass_through_the_restarting_regional_compile(layout: str) -> None:
    result = run_case(build_case(layout, cfg=ONE_CHUNK), analysis_only=True)
    assert _restarted(result), result.report.notes
    assert result.passed and result.check_passed and result.eager_match, result.failure_reasons()


def test_fused_paged_is_one_site_of_the_whole_allocation_per_call() -> None:
    result = run_case(build_case("fused_paged", expect_clean=False, cfg=ONE_CHUNK), analysis_only=True)
    assert _restarted(result), result.report.notes
    assert result.passed and not result.check_passed, result.failure_reasons()
    assert {c.nbytes for c in result.report.clones} == {2 * ONE_CHUNK.num_slots * ONE_CHUNK.dim * 4} == {65536}
    assert {c.pool for c in result.report.clones} == {"layer0.v", "layer1.v"}
    outcome = _outcome(result)  # the negative control: analysis-only compared no generated code
    assert outcome.eager_match is True and outcome.eager_compared == EagerCompared.POST_GRAD
    assert outcome.to_dict()["eager_compared"] == "post-grad graph, not generated code"
    assert result.eager_compared == EagerCompared.POST_GRAD  # the plugin's CaseResult says the same


def test_full_runs_the_generated_code_and_catches_the_miscompile() -> None:
    """Two chunks: the miscompile is in the graph dynamo recompiles with the pools' storage offset symbolic."""
    result = run_case(build_case("fused_paged", expect_clean=False), analysis_only=False)
    assert not result.passed and result.eager_match is False, result.failure_reasons()
    lost = {f.pool for f in result.report.run_findings if f.kind == WriteProblem.LOST_WRITE}
    assert {"layer0.v", "layer1.v"} <= lost, result.failure_reasons()
    assert any("reinterpret_tensor" in code for s in result.report.sources.values() for code in s.generated)
    assert _outcome(result).eager_compared == EagerCompared.GENERATED == result.eager_compared
