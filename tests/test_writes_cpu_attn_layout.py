"""vLLM's CPU cache write as its kernel lays a block out: the registered footprint, and the full mode's scan.

vLLM's CPU attention (``_C::cpu_attn_reshape_and_cache``, csrc/cpu/cpu_attn_vec.hpp) writes a token's K
column-major in its block ([head_dim, block_size] per block and head) and its V row-major. A footprint
that saves K's row instead misses elements the kernel writes: the rollback leaves eager's K there, and
where the compiled K differs from eager's in its last bits, the full mode's scan of every call reports
them as "written only by the compiled run" (a false ``lost_write`` on vLLM's engine from the first
decode call on). The stand-in kernel below writes vLLM's layout: the registered footprint names exactly
the elements it writes (a row-major footprint does not: the oracle can fail), and a prefill plus decode
rollout through it passes the every-call scan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import torch

from compile_checks import Case, run_case
from compile_checks.check.writes.footprint import (
    Footprint,
    cpu_attn_footprints,
    op_footprints,
    register_write_footprint,
)

pytestmark = pytest.mark.compile

BLOCKS, HEADS, BLOCK, DIM = 8, 2, 16, 8


def _views(kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of a layer's cache as vLLM's CPU backend splits it (``do_kv_cache_update``)."""
    blocks, heads, rows, dims = kv_cache.shape
    k, v = kv_cache.view(blocks, heads, rows * 2, dims // 2).chunk(2, dim=2)
    return k, v


def _update(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
    # the kernel's layout (csrc/cpu/cpu_attn_vec.hpp reshape_and_cache): K column-major, V row-major per block
    key_cache, value_cache = _views(kv_cache)
    n, heads, rows, dim = key_cache.shape
    column_major = key_cache.as_strided((n, heads, dim, rows), (key_cache.stride(0), key_cache.stride(1), rows, 1))
    keep = slots >= 0
    block, row = slots[keep] // rows, slots[keep] % rows
    column_major.permute(0, 3, 1, 2)[block, row] = key[keep]
    value_cache.transpose(1, 2)[block, row] = value[keep]


# like vLLM's unified_kv_cache_update: the layer's whole cache goes in, the op splits it
@torch.library.custom_op("w51_tests::cpu_cache_update", mutates_args=("kv_cache",))
def cpu_cache_update(
    key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    _update(key, value, kv_cache, slot_mapping)


def _vllm_op_footprint(call: Mapping[str, Any]) -> list[Footprint]:  # what vLLM's op registers
    key_cache, value_cache = _views(call["kv_cache"])
    split = {"key_cache": key_cache, "value_cache": value_cache, "slot_mapping": call["slot_mapping"], "isa": "vec"}
    return cpu_attn_footprints(split)


cpu_cache_update.register_fake(lambda key, value, kv_cache, slot_mapping: None)
register_write_footprint("w51_tests::cpu_cache_update", _vllm_op_footprint)


def _case(op: Any) -> Case:
    kv = torch.zeros(BLOCKS, HEADS, BLOCK, 2 * DIM)  # vLLM's CPU cache: (blocks, H, block_size, 2 * head_dim)
    gen = torch.Generator().manual_seed(0)
    # a prefill of 4 tokens in block 1, then 3 decode steps (one region under dynamic=True)
    steps = [torch.arange(4) + BLOCK] + [torch.tensor([BLOCK + 4 + i]) for i in range(3)]
    new = [
        (torch.randn(len(s), HEADS, DIM, generator=gen), torch.randn(len(s), HEADS, DIM, generator=gen)) for s in steps
    ]

    def step(kv: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        op(key, value, kv, slots)
        return (key * value).sum()

    def driver(compiled):  # type: ignore[no-untyped-def]
        return [compiled(kv, key, value, slots) for (key, value), slots in zip(new, steps, strict=True)]

    return Case("cpu_attn_layout", step, pools={"kv": kv}, driver=driver, dynamic=True)


def test_vllm_cpu_layout_passes_the_every_call_scan() -> None:
    result = run_case(_case(torch.ops.w51_tests.cpu_cache_update), analysis_only=False)
    assert sum(result.report.region_calls.values()) == 4, result.report.region_calls
    assert result.passed and not result.report.run_findings, result.failure_reasons()


# the op's schema as vLLM's CPU build declares it (the op itself needs that build: tests/test_vllm_engine.py)
_SCHEMA = torch._C.parse_schema(
    "_C::cpu_attn_reshape_and_cache(Tensor key, Tensor value, Tensor(a2!) key_cache, Tensor(a3!) value_cache, "
    'Tensor slot_mapping, str isa, float k_scale=1., float v_scale=1., str kv_cache_dtype="auto") -> ()'
)


class _Op:
    _schema = _SCHEMA


def _written(fps: list[Footprint]) -> set[int]:
    return set(torch.cat([f.offsets() for f in fps]).tolist())


def test_registered_footprint_is_what_the_kernel_writes() -> None:
    kv = torch.zeros(BLOCKS, HEADS, BLOCK, 2 * DIM)
    k, v = _views(kv)
    slots = torch.tensor([BLOCK + 3, 3 * BLOCK - 1, -1, 5])
    key, value = torch.rand(4, HEADS, DIM) + 1, torch.rand(4, HEADS, DIM) + 1
    fps = op_footprints(_Op(), "_C::cpu_attn_reshape_and_cache", (key, value, k, v, slots, "vec"), {})
    assert fps is not None
    _update(key, value, kv, slots)
    changed = set((kv.reshape(-1) != 0).nonzero().reshape(-1).tolist())
    assert _written(fps) == changed  # every element the kernel wrote, and only those
    # the oracle can fail: K's rows (row-major) are not what the kernel writes
    rows = [slots[slots >= 0] // BLOCK, slots[slots >= 0] % BLOCK]
    assert _written([Footprint.indexed(c.transpose(1, 2), rows) for c in (k, v)]) != changed
    # the rollback puts back exactly what the kernel overwrote
    kv.zero_()
    saved = [f.save() for f in fps]
    _update(key, value, kv, slots)
    for f, pre in zip(fps, saved, strict=True):
        f.restore(pre)
    assert not kv.any()
