"""AnyFlow FAR's cache writes (diffusers 0.42.1, examples/anyflow_far): every copy explained, the fix copy-free.

The truth is Inductor's generated code (a full compile, caches off): diffusers' four slice assignments allocate
a buffer of each ``(2, ...)`` cache's exact shape in every cache step's code, and each copy's cause is
``chained_writes`` (the K write's result is written again by the V write, so Inductor keeps it functional);
the ``compressed_cache`` writes of zero tokens (``[:0]``) are said to move nothing, and skipping them in Python
removes exactly the ``compressed_cache`` copies. The fixed writes (one assignment per cache) allocate none.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from compile_checks import Case, run_case

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "anyflow_far"
sys.path.insert(0, str(EXAMPLE))

from far_blocks import FarConfig, write_diffusers  # noqa: E402

pytestmark = [pytest.mark.compile, pytest.mark.slow]

ZERO_LENGTH = "moves no element"
# the CPU wrapper's allocations with static sizes, read here, not by the check
_ALLOC = re.compile(r"empty_strided_cpu\(\(([\d, ]*)\), \([^)]*\), torch\.(\w+)\)")


def _load_cases():  # type: ignore[no-untyped-def]
    """examples/anyflow_far/cases.py under a name of its own (other examples have a ``cases`` module too)."""
    spec = importlib.util.spec_from_file_location("anyflow_far_cases", EXAMPLE / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _no_caches() -> None:
    torch._inductor.config.force_disable_caches = True


def _allocated_shapes(result) -> list[tuple[int, ...]]:  # type: ignore[no-untyped-def]
    return [
        tuple(int(d) for d in dims.split(",") if d.strip())
        for s in result.report.sources.values()
        for code in s.generated
        for dims, _ in _ALLOC.findall(code)
    ]


def test_diffusers_writes_copy_each_cache_whole_and_say_why() -> None:
    cfg = FarConfig()
    result = run_case(_load_cases().build_case("diffusers", expect_clean=False), analysis_only=False)
    assert result.passed and result.eager_match, result.failure_reasons()
    clones = result.report.clones
    shapes = {f"layer{i}.{n}": s for i in range(cfg.num_layers) for n, s in cfg.cache_shapes().items()}
    assert {c.pool for c in clones} == set(shapes), clones
    assert all(c.explanation.cause == "chained_writes" for c in clones), [c.explanation for c in clones]
    assert all(not c.upper_bound and c.nbytes == math.prod(shapes[c.pool]) * 4 for c in clones), clones
    # the generated code allocates a buffer of each cache's exact shape: one per cache per cache step
    allocated = _allocated_shapes(result)
    for name in ("full_cache", "compressed_cache"):
        per_step = sum(1 for c in clones if c.pool == f"layer0.{name}")
        assert per_step == cfg.chunks, clones  # every cache step's region copies it (the later ones recompiled)
        assert allocated.count(cfg.cache_shapes()[name]) >= cfg.chunks, allocated
    # zero-length writes: the compressed cache's first cache steps (no chunk compressed yet), never the full one
    said = [c for c in clones if ZERO_LENGTH in c.explanation.reason]
    assert {c.pool.split(".")[1] for c in said} == {"compressed_cache"}, said
    empty_steps = sum(1 for chunk in range(cfg.chunks) if chunk + 1 - (cfg.full_chunk_limit - 1) <= 0)
    assert len(said) == empty_steps * cfg.num_layers, said
    assert "torch.stack([k, v])" in clones[0].explanation.fix and "[:0]" in clones[0].explanation.fix


def test_the_fix_allocates_no_cache_sized_buffer() -> None:
    cfg = FarConfig()
    result = run_case(_load_cases().build_case("one_write", expect_clean=True), analysis_only=False)
    assert result.passed and result.eager_match, result.failure_reasons()
    assert result.report.clones == [] and result.report.other_clones == []
    allocated = _allocated_shapes(result)
    assert not set(cfg.cache_shapes().values()) & set(allocated), allocated


def _empty_skipped(kv_cache, flag, key, value):  # type: ignore[no-untyped-def]
    """diffusers' writes with only the zero-length ones skipped (the full cache still written K, then V)."""
    if flag["num_compressed_tokens"]:
        raise AssertionError("the case writes no compressed token")
    kv_cache["full_cache"][0, :, :, : flag["num_full_tokens"], :] = key
    kv_cache["full_cache"][1, :, :, : flag["num_full_tokens"], :] = value


@pytest.mark.parametrize("write", [write_diffusers, _empty_skipped], ids=["diffusers", "empty_skipped"])
def test_a_zero_length_write_costs_the_compressed_copy_and_skipping_it_removes_it(write) -> None:  # type: ignore[no-untyped-def]
    cfg = FarConfig()
    caches = {n: torch.zeros(s) for n, s in cfg.cache_shapes().items()}
    flag = {"num_compressed_tokens": 0, "num_full_tokens": 8}

    def cache_step(x: torch.Tensor, kv_cache: dict[str, torch.Tensor]) -> torch.Tensor:
        write(kv_cache, flag, x * 2, x * 3)
        return x.sum()

    x = torch.randn(1, cfg.heads, 8, cfg.head_dim)
    result = run_case(
        Case("step", cache_step, args=(x, caches), pools=dict(caches), expect_clean=False, dynamic=False),
        analysis_only=False,
    )
    copied = {c.pool for c in result.report.clones}
    allocated = _allocated_shapes(result)
    assert "full_cache" in copied and cfg.cache_shapes()["full_cache"] in allocated  # chained: copied either way
    skipped = write is _empty_skipped
    assert ("compressed_cache" in copied) is not skipped, result.report.clones
    assert (cfg.cache_shapes()["compressed_cache"] in allocated) is not skipped, allocated
