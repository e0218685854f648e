"""The gate of AnyFlow FAR's chunk loop (diffusers 0.42.1's cache writes, at toy size, in :mod:`far_blocks`).

- ``diffusers``: the cache step's four slice assignments, as diffusers writes them: every cache step copies
  each ``(2, ...)`` cache of each block whole (cause ``chained_writes``; the ``compressed_cache`` copies of
  the first cache steps come from writes of zero tokens). Expected to copy: the negative control.
- ``one_write``: the fix (each cache written once, K and V stacked; a write of no tokens skipped): clean.

Each block is compiled as ``compile_repeated_blocks`` does (``dynamic=None``: the second cache step's new
token counts recompile with automatic dynamic shapes). ``--full`` settles the copies from the generated code.
"""

from __future__ import annotations

import torch
from far_blocks import FarConfig, allocate_caches, build_model, compile_repeated_blocks, pools_of, rollout

from compile_checks import Case

CONFIG = FarConfig()


def build_case(write: str, *, expect_clean: bool, cfg: FarConfig = CONFIG, dynamic: bool | None = None) -> Case:
    """One rollout of ``cfg.chunks`` chunks; the eager reference runs on caches of its own."""
    noise = torch.randn(
        cfg.batch, cfg.chunks * cfg.full_tokens_per_chunk, cfg.dim, generator=torch.Generator().manual_seed(1)
    )
    reference = rollout(cfg, allocate_caches(cfg), noise)(build_model(cfg, write))
    caches, model = allocate_caches(cfg), build_model(cfg, write)

    def verify(output: torch.Tensor) -> tuple[bool, float]:
        return torch.allclose(output, reference, rtol=1e-4, atol=1e-5), float((output - reference).abs().max())

    return Case(
        name=write,
        fn=model,
        compile=lambda backend: compile_repeated_blocks(model, backend, dynamic=dynamic),
        pools=pools_of(caches),
        driver=rollout(cfg, caches, noise),
        expect_clean=expect_clean,
        verify=verify,
        description=f"AnyFlow FAR chunk loop ({cfg.chunks} chunks, {cfg.num_layers} blocks), {write} cache writes",
    )


def cases() -> list[Case]:
    return [build_case("diffusers", expect_clean=False), build_case("one_write", expect_clean=True)]
