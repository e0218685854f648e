"""The engine gate's verdict rules, without an engine: the generated code must agree, a cache must exist."""

from __future__ import annotations

from compile_checks.check.findings import CloneReport
from compile_checks.pipelines.vllm_engine import EngineGate, GeneratedBuffers, LayerCache

LAYER = LayerCache("model.layers.0.self_attn.attn", (16, 2, 128, 128), "float32", 2097152, received=False, reached=10)


def test_a_clean_run_whose_code_agrees_passes() -> None:
    gate = EngineGate(CloneReport(num_regions=1), [LAYER], [GeneratedBuffers(0, 0, 0, 0, 0)], [[1, 2]])
    assert gate.passed and gate.problems == []


def test_code_that_allocates_what_the_check_did_not_count_fails() -> None:
    """Negative control: the check says clean, the generated code holds a cache-sized buffer."""
    gate = EngineGate(CloneReport(num_regions=1), [LAYER], [GeneratedBuffers(0, 0, 0, 1, 2097152)], [[1, 2]])
    assert not gate.passed
    assert gate.problems == [
        "region 0: the check counts 0 pool copies (0 B), Inductor's generated code fills 1 buffers from the pools "
        "(2097152 B)"
    ]


def test_unreadable_code_and_no_cache_fail() -> None:
    unreadable = EngineGate(CloneReport(num_regions=1), [LAYER], [GeneratedBuffers(0, 0, 0, None, None)], [[1]])
    assert not unreadable.passed
    no_cache = EngineGate(CloneReport(num_regions=1), [], [GeneratedBuffers(0, 0, 0, 0, 0)], [[1]])
    assert not no_cache.passed and "allocated no KV cache" in no_cache.problems[0]
    # nothing compiled (an eager engine): said as such, never as a missing cache
    eager = EngineGate(CloneReport(num_regions=0), [LAYER], [], [[1]], {"mode": "NONE"})
    assert not eager.passed and eager.problems == ["vLLM's model runner compiled nothing (mode NONE): nothing to gate"]
