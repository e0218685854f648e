"""The engine's gate: the toy DiT's denoising loop in the split pool layout (must stay clean) and
in the fused layout (a negative control: the check must keep seeing its pool clone).

``cases`` is a zero-argument factory, so every gate run (and every pipeline) gets fresh pools.
Targets: ``compile-checks gate cases.py:cases``, or ``[tool.compile_checks]`` in pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from toy_dit import ToyCausalDiT, ToyDiTConfig, allocate_pools, chunk_slots

from compile_checks import Case

CONFIG = ToyDiTConfig()
TIMESTEP = torch.tensor([0.5])


def _loop(
    cfg: ToyDiTConfig, noise: torch.Tensor, k_pools: list[torch.Tensor], v_pools: list[torch.Tensor]
) -> Callable[[Callable[..., Any]], torch.Tensor]:
    """The engine's host loop: one step per chunk, each committing its K/V before the next reads it."""

    def drive(step: Callable[..., Any]) -> torch.Tensor:
        outs = []
        for chunk in range(cfg.num_chunks):
            write, window = chunk_slots(cfg, chunk)
            outs.append(step(noise[chunk], TIMESTEP, k_pools, v_pools, write, window))
        return torch.stack(outs)

    return drive


def build_case(layout: str, *, expect_clean: bool, name: str | None = None, cfg: ToyDiTConfig = CONFIG) -> Case:
    """The denoising loop over ``cfg.num_chunks`` chunks with pools in ``layout`` ("split" | "fused")."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = ToyCausalDiT(cfg).eval().requires_grad_(False)  # inference: no autograd graph
    noise = torch.randn(cfg.num_chunks, cfg.chunk_tokens, cfg.dim, generator=gen)
    reference = _loop(cfg, noise, *allocate_pools(cfg, layout))(model)  # eager, on pools of its own

    def verify(output: torch.Tensor) -> tuple[bool, float]:
        diff = float((output - reference).abs().max())
        return torch.allclose(output, reference, rtol=1e-4, atol=1e-5), diff

    k_pools, v_pools = allocate_pools(cfg, layout)
    pools = {f"layer{i}.{kv}": p for i in range(cfg.num_layers) for kv, p in (("k", k_pools[i]), ("v", v_pools[i]))}
    return Case(
        name=name or layout,
        fn=model,
        pools=pools,
        driver=_loop(cfg, noise, k_pools, v_pools),
        expect_clean=expect_clean,
        verify=verify,
        description=f"toy causal DiT, {cfg.num_layers} layers, {cfg.num_chunks} chunks, {layout} K/V pools",
    )


def cases() -> list[Case]:
    return [build_case("split", expect_clean=True), build_case("fused", expect_clean=False)]
