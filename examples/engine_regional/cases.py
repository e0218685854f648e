"""LingBot-like blocks gated through vLLM-Omni's ``regionally_compile(model, dynamic=True)``.

- ``split``: the request-local cache, committed by ``copy_`` on every forward: clean.
- ``stale``: the same cache read by the denoising forwards and committed once per chunk: clean.
- ``paged``: the fused write+attend op on split flat pools: clean.
- ``fused_paged``: the same op on K and V as two halves of one allocation: each block call copies
  the allocation (negative control).

``dynamic=True`` makes dynamo restart each block's first compile (``TensorifyScalarRestartAnalysis``
for the float ``softmax_scale``); the restarted attempt is no region of its own.
"""

from __future__ import annotations

from typing import Any

import torch
from lingbot_like import Caches, LingBotConfig, LingBotLike, regionally_compile, rollout

from compile_checks import Case

CONFIG = LingBotConfig()


def build_case(layout: str, *, expect_clean: bool = True, cfg: LingBotConfig = CONFIG, **case_fields: Any) -> Case:
    """One rollout of ``cfg.num_chunks`` chunks; the eager reference runs on caches of its own."""
    noise = torch.randn(cfg.num_chunks, cfg.chunk_tokens, cfg.dim, generator=torch.Generator().manual_seed(1))

    def make_model() -> LingBotLike:
        torch.manual_seed(0)
        return LingBotLike(cfg).eval().requires_grad_(False)

    reference = rollout(cfg, Caches(cfg, layout), noise)(make_model())
    caches, model = Caches(cfg, layout), make_model()

    def verify(output: torch.Tensor) -> tuple[bool, float]:
        return torch.allclose(output, reference, rtol=1e-4, atol=1e-4), float((output - reference).abs().max())

    return Case(
        name=layout,
        fn=model,
        compile=lambda backend: regionally_compile(model, backend=backend, dynamic=True),
        pools=caches.pools,
        driver=rollout(cfg, caches, noise),
        reset=caches.reset,
        expect_clean=expect_clean,
        verify=verify,
        description=f"{cfg.num_layers} LingBot-like blocks, regionally_compile(dynamic=True), {layout} cache",
        **case_fields,
    )


def cases() -> list[Case]:
    return [
        build_case("split"),
        build_case("stale"),
        build_case("paged"),
        build_case("fused_paged", expect_clean=False),
    ]
