"""The gate of a transformers ``StaticCache`` decoder: the tiny random model of :mod:`tiny_llm`.

- ``decode``: ``DECODE_STEPS`` decode steps through ``torch.compile(model, fullgraph=True)`` (the
  compile transformers documents for a static cache) from a prefilled cache: must stay clean.
- ``stale_read``: the same loop with layer 0 a :class:`tiny_llm.StaleReadLayer`, which attends over
  the cache as it was before the step's write (negative control: the whole layer-0 K/V pools are
  copied on every step).
- ``generate``: ``model.generate()`` compiling its own decode steps through
  ``generation_config.compile_config = CompileConfig(backend=<the check's backend>)``: the check
  sees every region transformers compiles (``CompileConfig`` deep-copies its backend).

The sliding layer keeps its fill level as a Python int; the write check needs no ``reset=`` for it:
it compares each compiled call with that call's own graph run eagerly, and the host loop runs once.
The pools are the cache object's ``StaticLayer.keys`` / ``values`` ``[B, H, L, D]``, named with
``compile_checks.pools.pools_from_module``. ``cases`` is a zero-argument factory: every gate run
gets a fresh model and cache.
"""

from __future__ import annotations

import torch
from tiny_llm import (
    decode_steps,
    generate_tokens,
    pool_names,
    prefill,
    static_cache,
    tiny_model,
    use_compile_config,
)

from compile_checks import Case
from compile_checks.pools import pools_from_module


def _matches(reference: torch.Tensor):
    def verify(output: torch.Tensor) -> tuple[bool, float]:
        diff = float((output.float() - reference.float()).abs().max())
        return torch.allclose(output.float(), reference.float(), rtol=1e-4, atol=1e-5), diff

    return verify


def decode_case(name: str = "decode", *, stale_read: bool = False, expect_clean: bool = True) -> Case:
    """Decode steps on a prefilled static cache; the eager reference on a cache of its own."""
    model = tiny_model()
    reference_cache = static_cache(stale_read=stale_read)
    reference = decode_steps(reference_cache, prefill(model, reference_cache))(model)
    cache = static_cache(stale_read=stale_read)
    first = prefill(model, cache)
    return Case(
        name=name,
        fn=model,
        fullgraph=True,
        pools=lambda: pools_from_module(cache, names=pool_names()),
        driver=decode_steps(cache, first),
        expect_clean=expect_clean,
        verify=_matches(reference),
        description="transformers StaticCache, tiny Qwen2 (full + sliding-window layer), compiled decode steps"
        + (", layer 0 reads its pool after the write" if stale_read else ""),
    )


def generate_case() -> Case:
    """``generate()`` with transformers' own compile (``CompileConfig``) of the check's backend."""
    model = tiny_model()
    reference = generate_tokens(model, static_cache())  # before any compile_config: eager
    cache = static_cache()
    return Case(
        name="generate",
        fn=model,
        compile=lambda backend: use_compile_config(model, backend),  # in place: generate() compiles
        pools=lambda: pools_from_module(cache, names=pool_names()),
        driver=lambda _model: generate_tokens(model, cache),
        verify=_matches(reference),
        description="transformers generate() on a StaticCache, compiled through CompileConfig(backend=...)",
    )


def cases() -> list[Case]:
    return [decode_case(), decode_case("stale_read", stale_read=True, expect_clean=False), generate_case()]
