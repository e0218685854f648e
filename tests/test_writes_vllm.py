"""vLLM's own side-effect KV write (``vllm::unified_kv_cache_update``, ``mutates_args=[]``, the cache from
the forward context, a dummy output fed to ``unified_attention_with_output``), with vLLM's real ops and
forward context on CPU (the attention layer is a stand-in: see ``_vllm_kv_update``).

Clean twin: vLLM's pattern: its writes are attributed to the forward-context pools (no failure, no
'never received' error), in the analysis-only run and in Inductor's generated code. Negative controls:
the dummy dependency forgotten (AOT drops the op: ``lost_write``), and the dummy only feeding a size-0
sum (post-grad keeps the op, Inductor's generated code has no call: ``dropped_write_op`` + ``lost_write``
with codegen, ``unanchored_write_op`` + ``undeclared_write`` analysis-only).
"""

from __future__ import annotations

import _vllm_kv_update as kv
import pytest
import torch

from compile_checks.case import Case, run_case
from compile_checks.pools import pools_from_forward_context
from compile_checks.vocab import WriteProblem

pytestmark = pytest.mark.compile

K, V = f"{kv.LAYER}.k", f"{kv.LAYER}.v"
SLOTS = torch.tensor([2, 5, 9])


def _run(fn, analysis_only: bool, update_in_forward: bool = False):
    with kv.vllm_forward() as (config, layer):
        layer.update_in_forward = update_in_forward
        q, k, v = (torch.randn(3, 2, 4) for _ in range(3))
        case = Case(
            fn.__name__, fn, pools=pools_from_forward_context(config), driver=kv.driver_for(config, SLOTS, q, k, v)
        )
        result = run_case(case, analysis_only=analysis_only)
        return result, layer.kv_cache.clone(), (k, v)


def _by_kind(result) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in result.report.run_findings:
        out.setdefault(str(f.kind), []).append(f)
    return out


@pytest.mark.parametrize("analysis_only", [True, False])
def test_vllm_pattern_is_attributed_and_passes(analysis_only: bool) -> None:
    result, cache, (k, v) = _run(kv.vllm_pattern, analysis_only)
    found = _by_kind(result)
    assert set(found) == {WriteProblem.SIDE_EFFECT_WRITE}, result.report.run_findings
    writes = {f.pool: f for f in found[WriteProblem.SIDE_EFFECT_WRITE]}
    assert set(writes) == {K, V}
    for f in writes.values():
        assert (f.op, f.rows, f.nbytes, f.fails) == ("vllm::unified_kv_cache_update", (2, 5, 9), 3 * 2 * 4 * 4, False)
        assert f.details["anchored"] is True
        assert f.details["in_generated_code"] is (None if analysis_only else True)
    assert result.passed, result.report.problems
    assert torch.equal(cache[0][SLOTS], k) and torch.equal(cache[1][SLOTS], v)


@pytest.mark.parametrize("analysis_only", [True, False])
def test_forgotten_dummy_dependency_is_a_lost_write(analysis_only: bool) -> None:
    result, cache, _ = _run(kv.dummy_dropped, analysis_only)
    lost = {f.pool: f for f in _by_kind(result)[WriteProblem.LOST_WRITE]}
    assert set(lost) == {K, V}
    assert lost[K].op == "vllm::unified_kv_cache_update" and lost[K].rows == (2, 5, 9)
    assert not result.passed
    assert not cache.ne(0).any(), "the compiled run wrote nothing (and the eager reference was undone)"


def test_dummy_into_a_size0_sum_dropped_by_codegen() -> None:
    result, cache, _ = _run(kv.dummy_into_sum, analysis_only=False)
    found = _by_kind(result)
    [dropped] = found[WriteProblem.DROPPED_WRITE_OP]
    assert dropped.op == "vllm::unified_kv_cache_update" and "not in Inductor's generated code" in dropped.message
    assert {f.pool for f in found[WriteProblem.LOST_WRITE]} == {K, V}
    assert not result.passed and not cache.ne(0).any()


def test_dummy_into_a_size0_sum_fails_analysis_only_too() -> None:
    """Analysis-only runs the post-grad graph, which still writes: the unanchored dummy fails the case."""
    result, cache, _ = _run(kv.dummy_into_sum, analysis_only=True)
    found = _by_kind(result)
    assert WriteProblem.LOST_WRITE not in found
    assert len(found[WriteProblem.UNANCHORED_WRITE_OP]) == 1
    assert {f.pool for f in found[WriteProblem.UNDECLARED_WRITE]} == {K, V}
    assert not result.passed
    assert cache.ne(0).any()


@pytest.mark.parametrize("analysis_only", [True, False])
def test_backend_updating_in_attention_forward_is_attributed(analysis_only: bool) -> None:
    result, cache, (k, _) = _run(kv.update_in_attention, analysis_only, update_in_forward=True)
    found = _by_kind(result)
    assert set(found) == {WriteProblem.SIDE_EFFECT_WRITE}, result.report.run_findings
    assert {(f.op, f.pool) for f in found[WriteProblem.SIDE_EFFECT_WRITE]} == {
        ("vllm::unified_attention_with_output", K),
        ("vllm::unified_attention_with_output", V),
    }
    assert result.passed, result.report.problems
    assert torch.equal(cache[0][SLOTS], k)
