"""The TP engine's gate: every rank checked on its own shard, ``world_size=2`` under torch.distributed.

``rank_case(layout)`` returns the per-rank factory ``make_case(rank, world_size) -> Case``; the
factories are module-level functions, because each rank imports this file again in its own process.

- ``tp_split``: split pools on every rank: clean on both.
- ``tp_fused``: fused pools on every rank: the negative control, every rank clones.
- ``tp_asymmetric``: rank 0 split, rank 1 fused (a layout that differs between ranks): only rank 1
  clones, and the merged report must say the ranks differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tp_dit import TPCausalDiT, TPConfig, allocate_pools, chunk_slots

from compile_checks import Case
from compile_checks.ranks import RankedCase

CONFIG = TPConfig()


def _loop(
    cfg: TPConfig, noise: torch.Tensor, k_pools: list[torch.Tensor], v_pools: list[torch.Tensor]
) -> Callable[[Callable[..., Any]], torch.Tensor]:
    def drive(step: Callable[..., Any]) -> torch.Tensor:
        return torch.stack([step(noise[c], k_pools, v_pools, *chunk_slots(cfg, c)) for c in range(cfg.num_chunks)])

    return drive


def build_rank_case(layout: str, rank: int, world_size: int, cfg: TPConfig = CONFIG) -> Case:
    """This rank's shard of the model and pools in ``layout``, the host loop, and an eager reference."""
    model = TPCausalDiT(cfg, rank, world_size).eval()
    noise = torch.randn(cfg.num_chunks, cfg.chunk_tokens, cfg.dim, generator=torch.Generator().manual_seed(1))
    reference = _loop(cfg, noise, *allocate_pools(cfg, layout, world_size))(model)  # eager, its own pools

    def verify(output: torch.Tensor) -> tuple[bool, float]:
        return torch.allclose(output, reference, rtol=1e-4, atol=1e-5), float((output - reference).abs().max())

    k_pools, v_pools = allocate_pools(cfg, layout, world_size)
    pools = {f"layer{i}.{kv}": p for i in range(cfg.num_layers) for kv, p in (("k", k_pools[i]), ("v", v_pools[i]))}
    return Case(
        name=f"{layout}@rank{rank}",
        fn=model,
        pools=pools,
        driver=_loop(cfg, noise, k_pools, v_pools),
        verify=verify,
        description=f"TP toy DiT rank {rank}/{world_size}, {layout} pools",
    )


def split_case(rank: int, world_size: int) -> Case:
    return build_rank_case("split", rank, world_size)


def fused_case(rank: int, world_size: int) -> Case:
    return build_rank_case("fused", rank, world_size)


def asymmetric_case(rank: int, world_size: int) -> Case:
    """Rank 1 allocates its cache fused, the others split: one rank's layout differs."""
    return build_rank_case("fused" if rank == 1 else "split", rank, world_size)


def cases() -> list[RankedCase]:
    return [
        RankedCase("tp_split", split_case, world_size=2, timeout_s=240),
        RankedCase("tp_fused", fused_case, world_size=2, expect_clean=False, timeout_s=240),
        RankedCase("tp_asymmetric", asymmetric_case, world_size=2, expect_clean_by_rank=(True, False), timeout_s=240),
    ]
