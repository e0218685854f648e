"""The mutating call is named at the model's line, with the library wrapper it went through after it.

Negative control: the innermost non-torch frame (what the check named before) is the wrapper
inside ``ar_paging`` / site-packages, not the line of the model that called it.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

import ar_paging
from compile_checks.api import analyze_pool_clones
from compile_checks.explain.user_source import is_wrapper_frame, parse_stack_trace, user_frame, user_line, wrapper_line

SITE = Path(torch.__file__).resolve().parent.parent  # site-packages of this interpreter
WRAPPER = f"{SITE}/vllm_omni/diffusion/kv_cache.py"  # a library wrapper (not imported: only its path matters)
MODEL = "/home/user/engine/model.py"


def _node(trace: str) -> torch.fx.Node:
    g = torch.fx.Graph()
    n = g.placeholder("x")
    n.meta["stack_trace"] = trace
    return n


TRACE = (
    f'  File "{MODEL}", line 40, in forward\n    x = self.attn(x)\n'
    f'  File "{MODEL}", line 79, in attn\n    kv_cache_update(k, v, self.cache, slots)\n'
    f'  File "{WRAPPER}", line 12, in kv_cache_update\n    torch.ops.ar_paging.paged_write(k_pool, v_pool, k, v, s)\n'
)


def test_model_line_is_named_and_the_wrapper_after_it() -> None:
    node = _node(TRACE)
    assert user_line(node) == f"{MODEL}:79"
    assert wrapper_line(node) is not None and wrapper_line(node).endswith("vllm_omni/diffusion/kv_cache.py:12")


def test_negative_control_innermost_frame_is_the_wrapper() -> None:
    """Before: the innermost frame outside torch/the checker, i.e. the wrapper, was named."""
    frame = user_frame(_node(TRACE))
    assert frame is not None and frame.file == WRAPPER and is_wrapper_frame(frame)


def test_no_wrapper_gives_no_through_line_and_all_wrapper_trace_keeps_the_innermost() -> None:
    plain = _node(f'  File "{MODEL}", line 79, in attn\n    torch.ops.ar_paging.paged_write(k, v, a, b, s)\n')
    assert user_line(plain) == f"{MODEL}:79" and wrapper_line(plain) is None
    only_lib = _node(f'  File "{WRAPPER}", line 12, in kv_cache_update\n    x\n')
    assert user_line(only_lib) is not None and user_line(only_lib).endswith("kv_cache.py:12")
    assert all(is_wrapper_frame(f) for f in parse_stack_trace(TRACE)[2:])


@pytest.mark.compile
def test_compiled_clone_through_ar_paging_wrapper_is_explained_at_this_line() -> None:
    """End to end: a fused K/V pool written through ``ar_paging.pool_write_chunk`` (a wrapper)."""
    torch._inductor.config.force_disable_caches = True
    n, h, d = 32, 2, 4
    kv = torch.zeros(2, n, h, d)
    k_pool, v_pool = kv[0], kv[1]  # two views of one allocation: the V pool is cloned

    def step(k_pool: torch.Tensor, v_pool: torch.Tensor, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        ar_paging.pool_write_chunk(k_pool, v_pool, x, x * 2, slots)
        return x + 1

    call_line = inspect.getsourcelines(step)[1] + 1
    x = torch.randn(4, h, d)
    report = analyze_pool_clones(step, k_pool, v_pool, x, torch.arange(4), pools={"k": k_pool, "v": v_pool})
    explained = [c.explanation for c in report.clones if c.explanation is not None]
    assert explained, report
    e = explained[0]
    assert e.user_line is not None and e.user_line.endswith(f"test_explain_user_line.py:{call_line}"), e.user_line
    assert e.wrapper_line is not None and "ar_paging" in e.wrapper_line and "paged_write.py" in e.wrapper_line
    assert f"(through {e.wrapper_line})" in e.summary()
