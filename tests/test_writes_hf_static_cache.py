"""transformers' own ``StaticCache`` (a full layer and a sliding-window layer) under the write check, with the
default ``Case``: decode steps write K/V along L (``[B, H, L, D]``, ``index_copy_`` on dim 2) at positions
from the layer's 0-dim ``cumulative_length`` tensor, advanced in place; the sliding layer also keeps a Python
``int``. Each call's eager graph run restores the counter (the compiled call writes the same positions) and
a 0-dim counter named as a pool does not crash it. Negative control: a rollback that skips the counter (its
writes dropped from the undo log) makes the compiled call write other positions: ``diverged_state``.
"""

from __future__ import annotations

import pytest
import torch

from compile_checks.case import Case, run_case

pytestmark = pytest.mark.compile

STEPS = 3


def _case(name: str = "hf-static") -> tuple[Case, object]:
    from transformers import LlamaConfig, StaticCache

    config = LlamaConfig(
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        hidden_size=8,
        head_dim=4,
        layer_types=["full_attention", "sliding_attention"],
        sliding_window=8,
    )
    cache = StaticCache(config=config, max_cache_len=16)
    q, k, v = (torch.randn(1, 2, 1, 4) for _ in range(3))
    for layer in cache.layers:
        layer.lazy_initialization(k, v)
        layer.cumulative_length.fill_(2)  # a prefill of two tokens
        if hasattr(layer, "cumulative_length_int"):
            layer.cumulative_length_int = 2

    def decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = q
        for i in range(2):
            keys, values = cache.update(k, v, i)
            out = out + (q @ keys.transpose(-1, -2)).softmax(-1) @ values
        return out

    def driver(step):
        return [step(q, k, v) for _ in range(STEPS)]

    pools = {}
    for i, layer in enumerate(cache.layers):
        pools |= {f"layer{i}.k": layer.keys, f"layer{i}.v": layer.values, f"layer{i}.length": layer.cumulative_length}
    return Case(name, decode, pools=pools, driver=driver), cache


def test_static_cache_decode_passes_with_the_default_case() -> None:
    case, cache = _case()
    result = run_case(case, analysis_only=True)
    assert result.report.run_findings == [] and result.passed, result.report.problems
    full = cache.layers[0]
    assert int(full.cumulative_length) == 2 + STEPS, "the eager run's counter advance was undone"
    assert full.keys[:, :, 2 : 2 + STEPS].ne(0).all() and not full.keys[:, :, 2 + STEPS :].ne(0).any()


def test_a_counter_left_advanced_is_diverged_state(monkeypatch: pytest.MonkeyPatch) -> None:
    from compile_checks.check.writes import undo

    real = undo.UndoLog.rollback

    def rollback_but_the_counters(self: undo.UndoLog) -> list[str]:
        self.writes = [w for w in self.writes if w.footprint.tensor.dim() > 0]
        return real(self)

    monkeypatch.setattr(undo.UndoLog, "rollback", rollback_but_the_counters)
    case, _ = _case("hf-counter-kept")
    result = run_case(case, analysis_only=True)
    diverged = [f for f in result.report.run_findings if f.pool == "layer0.k"]
    assert diverged and str(diverged[0].kind) == "diverged_state" and diverged[0].details["dim"] == 2
    # the first call: eager wrote position 2, the compiled run (its counter left advanced) position 3
    assert "dim 2 [2]" in diverged[0].message and "dim 2 [3]" in diverged[0].message, diverged[0].message
    assert not result.passed
