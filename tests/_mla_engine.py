"""The issue-49 reproducer: an MLA-style engine (a latent and a rope cache per layer) whose cache-write op
declares ``mutates_args=()``, a newcomer's mistake: AOT autograd treats the op as pure, its unused output
makes it dead code, and the compiled run never writes the 4 caches (``lost_write`` on each)."""

from __future__ import annotations

import torch

from compile_checks import Case

LAYERS, SLOTS, D, LATENT, ROPE = 2, 16, 8, 6, 2


@torch.library.custom_op("mla49_tests::write_latent_rope", mutates_args=())
def write_latent_rope(
    latent_cache: torch.Tensor, rope_cache: torch.Tensor, latent: torch.Tensor, rope: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """Writes both caches, but its schema declares no mutation (the bug)."""
    latent_cache.index_copy_(0, slots, latent)
    rope_cache.index_copy_(0, slots, rope)
    return latent.new_empty(0)


@write_latent_rope.register_fake
def _(latent_cache, rope_cache, latent, rope, slots):  # type: ignore[no-untyped-def]
    return latent.new_empty(0)


class MLAEngine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.down = torch.nn.Parameter(torch.randn(LAYERS, D, LATENT + ROPE, generator=g) * 0.1)
        self.up = torch.nn.Parameter(torch.randn(LAYERS, LATENT + ROPE, D, generator=g) * 0.1)

    def forward(self, x: torch.Tensor, slots: torch.Tensor, caches: list[torch.Tensor]) -> torch.Tensor:
        for i in range(LAYERS):
            kv = x @ self.down[i]
            latent_cache, rope_cache = caches[2 * i], caches[2 * i + 1]
            write_latent_rope(latent_cache, rope_cache, kv[:, :LATENT], kv[:, LATENT:], slots)  # output unused
            window = torch.cat([latent_cache, rope_cache], dim=-1)  # attend over every slot
            x = x + torch.softmax(kv @ window.T, dim=-1) @ window @ self.up[i]
        return x


def caches() -> dict[str, torch.Tensor]:
    out = {}
    for i in range(LAYERS):
        out[f"layer{i}.latent"] = torch.zeros(SLOTS, LATENT)
        out[f"layer{i}.rope"] = torch.zeros(SLOTS, ROPE)
    return out


def mla_case(name: str = "mla") -> Case:
    engine, pools = MLAEngine().eval(), caches()
    x, slots = torch.randn(3, D, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 5, 9])

    def driver(step):  # type: ignore[no-untyped-def]
        return step(x, slots, list(pools.values()))

    return Case(name, engine, pools=pools, driver=driver)


def mla() -> list[Case]:
    return [mla_case()]
