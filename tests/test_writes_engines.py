"""Engines whose host loops keep Python state, under the default ``Case`` (no ``reset=``): the per-call
write check never replays them, so their allocators and counters never confuse it.

- a host loop allocating blocks from vLLM's own ``BlockPool`` (a Python free queue) for each chunk and
  freeing the chunk that leaves the window;
- transformers' ``StaticCache`` with a sliding-window layer (its fill level is a Python ``int``);
- an SGLang-style token pool: per-layer ``k_buffer[layer][loc] = k`` at slots from a Python free-slot list.

Each passes with 0 write findings; its negative control plants a write the compiler drops (an undeclared
op whose dummy is unused) and is caught as ``lost_write`` on that pool.
"""

from __future__ import annotations

import _writes_call_ops as ops
import pytest
import torch

from compile_checks.case import Case, run_case
from compile_checks.vocab import WriteProblem

pytestmark = pytest.mark.compile

H, D, BLOCK = 2, 4, 4


def _kinds(result) -> dict[str, str]:
    return {f.pool: str(f.kind) for f in result.report.run_findings}


# --- vLLM's BlockPool --------------------------------------------------------------------------------


def _paged_step(k_pool, v_pool, slots, k, v, drop: bool):
    """Commit a chunk's K/V into ``[blocks, block_size, H, D]`` pools at flat slots, attend over them."""
    if drop:
        ops.hidden_slot_write(k, slots)
    else:
        k_pool.flatten(0, 1).index_copy_(0, slots, k)
    v_pool.flatten(0, 1).index_copy_(0, slots, v)
    keys = k_pool.flatten(0, 1).index_select(0, slots)
    return (k * keys).sum()


@pytest.mark.parametrize("drop", [False, True])
def test_a_host_loop_allocating_from_vllms_block_pool(drop: bool) -> None:
    from vllm.v1.core.block_pool import BlockPool

    blocks = BlockPool(num_gpu_blocks=8, enable_caching=False, hash_block_size=BLOCK)
    k_pool, v_pool = torch.zeros(8, BLOCK, H, D), torch.zeros(8, BLOCK, H, D)
    ops.CONTEXT["pool"] = k_pool
    chunks = [(torch.randn(2 * BLOCK, H, D), torch.randn(2 * BLOCK, H, D)) for _ in range(4)]
    held: list = []

    def driver(step):
        for c, (k, v) in enumerate(chunks):
            new = blocks.get_new_blocks(2)  # the Python free queue moves: a replay would get other blocks
            held.append(new)
            ids = torch.tensor([b.block_id for b in new])
            slots = (ids[:, None] * BLOCK + torch.arange(BLOCK)).reshape(-1)
            step(k_pool, v_pool, slots, k, v, drop and c == 2)
            if len(held) > 2:  # the window holds two chunks: the oldest leaves
                blocks.free_blocks(held.pop(0))
        return blocks.get_num_free_blocks()

    result = run_case(
        Case("block-pool", _paged_step, pools={"k": k_pool, "v": v_pool}, driver=driver), analysis_only=True
    )
    if not drop:
        assert result.report.run_findings == [] and result.passed, result.report.problems
        assert v_pool.ne(0).any()
        return
    assert _kinds(result) == {"k": "lost_write"} and not result.passed, result.report.run_findings
    [f] = result.report.run_findings
    assert "call 1 of 1" in f.message and f.details["dim"] == 0  # the blocks of chunk 2, in the pool's own dims


# --- transformers' StaticCache with a sliding-window layer --------------------------------------------


@pytest.mark.parametrize("drop", [False, True])
def test_static_cache_with_a_sliding_window_layer(drop: bool) -> None:
    from transformers import LlamaConfig, StaticCache

    config = LlamaConfig(
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        hidden_size=8,
        head_dim=4,
        layer_types=["full_attention", "sliding_attention"],
        sliding_window=4,
    )
    cache = StaticCache(config=config, max_cache_len=16)
    q, k, v = (torch.randn(1, 2, 1, 4) for _ in range(3))
    for layer in cache.layers:
        layer.lazy_initialization(k, v)
    sliding = cache.layers[1]
    assert isinstance(getattr(sliding, "cumulative_length_int", None), int), "a sliding layer keeps a Python int"
    ops.CONTEXT["pool"] = sliding.keys

    def decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        out = q
        for i in range(2):
            keys, values = cache.update(k, v, i)
            out = out + (q @ keys.transpose(-1, -2)).softmax(-1) @ values
        if drop:  # a planted write into the sliding layer's keys that the compiler drops
            ops.hidden_seq_write(k * 3, pos)
        return out

    def driver(step):  # more steps than the window: the sliding layer rolls
        return [step(q, k, v, torch.tensor([3])) for _ in range(6)]

    pools = {}
    for i, layer in enumerate(cache.layers):
        pools |= {f"layer{i}.k": layer.keys, f"layer{i}.v": layer.values}
    result = run_case(Case("hf-sliding", decode, pools=pools, driver=driver), analysis_only=True)
    if not drop:
        assert result.report.run_findings == [] and result.passed, result.report.problems
        assert sliding.cumulative_length_int == 6  # the host loop ran once
        return
    assert _kinds(result) == {"layer1.k": "lost_write"} and not result.passed, result.report.run_findings


# --- an SGLang-style token pool ------------------------------------------------------------------------


class TokenPool:
    """SGLang's ``MHATokenToKVPool`` in miniature: per-layer buffers, a Python free-slot list."""

    def __init__(self, size: int, layers: int) -> None:
        self.k_buffer = [torch.zeros(size, H, D) for _ in range(layers)]
        self.v_buffer = [torch.zeros(size, H, D) for _ in range(layers)]
        self.free_slots = list(range(1, size))  # slot 0 is padding, as SGLang keeps it
        self.seq_lens = {0: 0}

    def alloc(self, n: int) -> torch.Tensor:
        out, self.free_slots = self.free_slots[:n], self.free_slots[n:]
        return torch.tensor(out)

    def free(self, slots: torch.Tensor) -> None:
        self.free_slots += slots.tolist()


@pytest.mark.parametrize("drop", [False, True])
def test_an_sglang_style_token_pool_with_a_python_allocator(drop: bool) -> None:
    pool = TokenPool(size=32, layers=2)
    ops.CONTEXT["pool"] = pool.k_buffer[1]

    def forward(x: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
        for layer in range(2):
            k, v = x * (layer + 1), x - layer
            if drop and layer == 1:
                ops.hidden_int32_write(k.view(torch.int32), loc)  # planted: dropped by the compiler
            else:
                pool.k_buffer[layer][loc] = k
            pool.v_buffer[layer][loc] = v
            x = x + pool.k_buffer[layer][loc].sum()
        return x

    def driver(step):
        outs = []
        for _ in range(4):
            loc = pool.alloc(3)
            outs.append(step(torch.randn(3, H, D), loc))
            pool.seq_lens[0] += 3
            if pool.seq_lens[0] > 6:  # a finished request's slots go back to the free list
                pool.free(loc)
        return outs

    pools = {f"k{i}": t for i, t in enumerate(pool.k_buffer)} | {f"v{i}": t for i, t in enumerate(pool.v_buffer)}
    result = run_case(Case("sglang", forward, pools=pools, driver=driver), analysis_only=True)
    if not drop:
        assert result.report.run_findings == [] and result.passed, result.report.problems
        assert pool.seq_lens[0] == 12
        return
    assert _kinds(result) == {"k1": "lost_write"} and not result.passed, result.report.run_findings
    assert WriteProblem.DIVERGED_STATE not in {f.kind for f in result.report.run_findings}
