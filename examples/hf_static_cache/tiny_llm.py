"""A tiny random transformers model decoding with ``StaticCache``, as transformers compiles it.

No model hub: a seeded ``Qwen2ForCausalLM`` (Llama's architecture plus per-layer sliding windows)
built from a config: 2 layers, 4 query heads, 2 KV heads, head_dim 16, vocab 128. Layer 0 attends
to everything (a ``StaticLayer``: ``keys`` / ``values`` ``[B, H, L, D]``, written with
``index_copy_`` at the position its ``cumulative_length`` tensor holds); layer 1 is a sliding
window of ``SLIDING_WINDOW`` tokens (a ``StaticSlidingWindowLayer``, whose fill level is also kept
as a Python int).

- :func:`decode_steps`: the decode loop transformers documents for a static cache, one token per
  step through ``torch.compile(model)``, from a cache an eager prefill filled.
- :class:`StaleReadLayer`: a full-attention layer that attends over the cache *as it was before
  this step's write* (it gathers the old rows, then writes). In eager order the read comes first;
  in the compiled graph it reads the pool after the in-place write, so Inductor keeps a copy of
  the whole pool every step: the bug class the gate exists to catch.
- :func:`generate_tokens`: ``model.generate()`` with the cache, compiled by transformers itself
  through ``generation_config.compile_config`` (``CompileConfig(backend=...)``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import CompileConfig, Qwen2Config, Qwen2ForCausalLM, StaticCache
from transformers.cache_utils import StaticLayer

MAX_CACHE_LEN = 32
SLIDING_WINDOW = 8
PROMPT_LEN = 4
DECODE_STEPS = 4
KV_HEADS, HEAD_DIM = 2, 16


def tiny_config() -> Qwen2Config:
    """2 layers (full attention, then a sliding window), 4 query heads sharing 2 KV heads."""
    return Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=KV_HEADS,
        vocab_size=128,
        max_position_embeddings=64,
        layer_types=["full_attention", "sliding_attention"],
        use_sliding_window=True,
        sliding_window=SLIDING_WINDOW,
    )


def tiny_model(seed: int = 0) -> Qwen2ForCausalLM:
    """The seeded random model, in inference mode (no autograd graph)."""
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(tiny_config()).eval().requires_grad_(False)


def prompt() -> torch.Tensor:
    """``[1, PROMPT_LEN]`` token ids."""
    return torch.randint(0, 128, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(0))


class StaleReadLayer(StaticLayer):
    """A ``StaticLayer`` whose attention reads the cache as it was before this step's write."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        every_row = torch.arange(self.max_cache_len, device=self.keys.device)
        old_keys, old_values = self.keys.index_select(2, every_row), self.values.index_select(2, every_row)
        super().update(key_states, value_states)  # index_copy_ into the pool, as StaticLayer does
        return old_keys, old_values


def static_cache(*, stale_read: bool = False) -> StaticCache:
    """An allocated ``StaticCache`` for the tiny model (layer 0 a :class:`StaleReadLayer` when ``stale_read``)."""
    cache = StaticCache(config=tiny_config(), max_cache_len=MAX_CACHE_LEN)
    if stale_read:
        cache.layers[0] = StaleReadLayer(max_cache_len=MAX_CACHE_LEN)
    cache.early_initialization(
        batch_size=1, num_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=torch.float32, device=torch.device("cpu")
    )
    return cache


def pool_names() -> dict[str, str]:
    """Dotted paths in the cache object -> the pool names the gate reports (``layers.0.keys`` -> ``layer0.k``)."""
    return {f"layers.{i}.{path}": f"layer{i}.{kv}" for i in range(2) for path, kv in (("keys", "k"), ("values", "v"))}


def prefill(model: Qwen2ForCausalLM, cache: StaticCache) -> torch.Tensor:
    """The prompt through the eager model (prefill is not compiled, as in transformers): the first token."""
    logits = model(prompt(), past_key_values=cache, use_cache=True).logits
    return logits[:, -1:].argmax(-1)


def decode_steps(cache: StaticCache, first_token: torch.Tensor) -> Any:
    """The host loop: ``DECODE_STEPS`` greedy steps, each one token at the next cache position."""

    def drive(step: Any) -> torch.Tensor:
        token, out = first_token, []
        for i in range(DECODE_STEPS):
            position = torch.tensor([PROMPT_LEN + i])
            logits = step(token, past_key_values=cache, cache_position=position, use_cache=True).logits
            token = logits[:, -1:].argmax(-1)
            out.append(logits)
        return torch.cat(out)

    return drive


def use_compile_config(model: Qwen2ForCausalLM, backend: Any) -> None:
    """Have ``generate()`` compile its decode steps with ``backend`` (transformers' own compile path).

    ``_compile_all_devices``: transformers compiles automatically on accelerators only; this opts a
    CPU model in (a documented testing flag).
    """
    config = CompileConfig(backend=backend, fullgraph=True)
    config._compile_all_devices = True
    model.generation_config.compile_config = config


def generate_tokens(model: Qwen2ForCausalLM, cache: StaticCache) -> torch.Tensor:
    """One greedy request through ``generate()`` on ``cache`` (reset first: a static cache is reused per request)."""
    cache.reset()
    return model.generate(
        prompt(), past_key_values=cache, max_new_tokens=DECODE_STEPS + 1, do_sample=False, pad_token_id=0
    )
