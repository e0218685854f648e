"""vLLM-Omni 0.30.0's fused paged write+attend op, faithful to its schema, for the LingBot-like blocks.

vLLM-Omni's ``vllm_omni::ar_diffusion_paged_write_attn`` (``experimental/ar_diffusion/kv_cache/
paged_attention.py``) is not installable in CI (its package pulls diffusers, cache-dit, onnxruntime ...).
What matters to the compiled code is its schema, kept here argument for argument: the action K/V
(``None`` for LingBot), the action slots, the query start locations, three Python ints
(``max_query_len``, ``max_seq_len``, ``stage_first_block``) and the staging buffers (``None``) declared
mutated beside the pools, and ``ARDiffusionPagedLayerInputs``' fields. With them, dynamo's
``dynamic=True`` recompile serves every later block call from one symbolic graph (the examples' shorter
op gets one graph per few calls); the kernel is the CPU reference path (the slots written, then
attention over the block table).

:func:`omni_case` is ``examples/engine_regional``'s ``fused_paged`` (or ``paged``) case with each block's
self-attention calling this op through these inputs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, NamedTuple

import torch

REGIONAL = Path(__file__).resolve().parent.parent / "examples" / "engine_regional"
sys.path.insert(0, str(REGIONAL))

import lingbot_like as ll  # noqa: E402


class OmniPagedLayerInputs(NamedTuple):
    """``ARDiffusionPagedLayerInputs`` (vLLM-Omni 0.30.0), field for field."""

    layer_idx: torch.Tensor
    key_pool: torch.Tensor
    value_pool: torch.Tensor
    block_size: int
    seq_len: int
    video_slots: torch.Tensor
    action_slots: torch.Tensor
    block_table: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    max_query_len: int
    max_seq_len: int
    stage_key: torch.Tensor | None = None
    stage_value: torch.Tensor | None = None
    reuse_history: bool = False
    stage_first_block: int = 0


@torch.library.custom_op(
    "omni_like::ar_diffusion_paged_write_attn", mutates_args=("key_pool", "value_pool", "stage_key", "stage_value")
)
def paged_write_attn_op(
    query: torch.Tensor,
    k_curr: torch.Tensor,
    v_curr: torch.Tensor,
    k_act: torch.Tensor | None,
    v_act: torch.Tensor | None,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_size: int,
    video_slots: torch.Tensor,
    action_slots: torch.Tensor,
    block_table: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    max_query_len: int,
    max_seq_len: int,
    softmax_scale: float,
    stage_key: torch.Tensor | None,
    stage_value: torch.Tensor | None,
    reuse_history: bool,
    stage_first_block: int,
) -> torch.Tensor:
    key_pool[video_slots] = k_curr.to(key_pool.dtype)
    value_pool[video_slots] = v_curr.to(value_pool.dtype)
    if k_act is not None and v_act is not None and k_act.shape[0] > 0:
        key_pool[action_slots] = k_act.to(key_pool.dtype)
        value_pool[action_slots] = v_act.to(value_pool.dtype)
    key_cache = key_pool.unflatten(0, (-1, block_size))
    value_cache = value_pool.unflatten(0, (-1, block_size))
    return ll._reference_paged_attention(query, key_cache, value_cache, block_table, seq_lens, softmax_scale)


@paged_write_attn_op.register_fake
def _(query, *args, **kwargs):  # type: ignore[no-untyped-def]
    return torch.empty_like(query)


def _attention_forward(
    self: ll.SelfAttention,
    hidden_states: torch.Tensor,
    *,
    cache: OmniPagedLayerInputs,
    current_start: int,
    sink_tokens: int,
    update_cache: bool,
    softmax_scale: float,
) -> torch.Tensor:
    """LingBotSelfAttention's paged branch: ``paged_write_attn(cache, q, k, v, None, None, scale)``."""
    query, key, value = self.project(hidden_states)
    output = torch.ops.omni_like.ar_diffusion_paged_write_attn(
        query[0],
        key[0],
        value[0],
        None,
        None,
        cache.key_pool,
        cache.value_pool,
        cache.block_size,
        cache.video_slots,
        cache.action_slots,
        cache.block_table,
        cache.query_start_loc,
        cache.seq_lens,
        cache.max_query_len,
        cache.max_seq_len,
        self.head_dim**-0.5,
        cache.stage_key,
        cache.stage_value,
        cache.reuse_history,
        cache.stage_first_block,
    ).unsqueeze(0)
    return self.o(output.flatten(2, 3))


class OmniAttention(ll.SelfAttention):
    forward = _attention_forward  # type: ignore[assignment]


class OmniCaches(ll.Caches):
    """The paged layouts' per-chunk inputs as vLLM-Omni builds them: a block table padded to a fixed width,
    int32 metadata, empty action slots."""

    def for_chunk(self, chunk: int) -> list[Any]:
        cfg = self.cfg
        first = 1 + chunk * cfg.chunk_frames  # block 0 is the null block
        blocks = torch.arange(1, first + cfg.chunk_frames)
        slots = torch.arange(first * cfg.block_size, (first + cfg.chunk_frames) * cfg.block_size)
        table = torch.zeros(1, cfg.pool_blocks, dtype=torch.int32)
        table[0, : blocks.numel()] = blocks.int()
        kv_len = blocks.numel() * cfg.block_size
        return [
            OmniPagedLayerInputs(
                torch.tensor(i),
                k,
                v,
                cfg.block_size,
                cfg.chunk_tokens,
                slots,
                torch.empty(0, dtype=torch.long),
                table,
                torch.tensor([0, cfg.chunk_tokens], dtype=torch.int32),
                torch.tensor([kv_len], dtype=torch.int32),
                cfg.chunk_tokens,
                cfg.pool_blocks * cfg.block_size,
            )
            for i, (k, v) in enumerate(self.kv)
        ]


def _model(cfg: ll.LingBotConfig) -> ll.LingBotLike:
    torch.manual_seed(0)
    model = ll.LingBotLike(cfg).eval().requires_grad_(False)
    for block in model.blocks:
        block.self_attn.__class__ = OmniAttention
    return model


def omni_case(layout: str, *, expect_clean: bool, cfg: ll.LingBotConfig | None = None) -> Any:
    """``examples/engine_regional``'s case of ``layout`` (``paged`` or ``fused_paged``) with the faithful op."""
    from compile_checks import Case

    spec = importlib.util.spec_from_file_location("engine_regional_cases_omni", REGIONAL / "cases.py")
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    cfg = cfg or ll.LingBotConfig()
    noise = torch.randn(cfg.num_chunks, cfg.chunk_tokens, cfg.dim, generator=torch.Generator().manual_seed(1))
    reference = ll.rollout(cfg, OmniCaches(cfg, layout), noise)(_model(cfg))
    caches, model = OmniCaches(cfg, layout), _model(cfg)

    def verify(output: torch.Tensor) -> tuple[bool, float]:
        return torch.allclose(output, reference, rtol=1e-4, atol=1e-4), float((output - reference).abs().max())

    return Case(
        name=layout,
        fn=model,
        compile=lambda backend: cases.regionally_compile(model, backend=backend, dynamic=True),
        pools=caches.pools,
        driver=ll.rollout(cfg, caches, noise),
        expect_clean=expect_clean,
        verify=verify,
    )
