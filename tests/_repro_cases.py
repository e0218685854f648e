"""Cases for ``compile-checks repro`` (tests/test_repro.py): two blocks compiled regionally with dynamic shapes,
their K/V pools split (clean) or two halves of one allocation (``fused``: Inductor copies the allocation)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from compile_checks import Case


@torch.library.custom_op("repro_test::write_attend", mutates_args=("k_pool", "v_pool"))
def write_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                 slots: torch.Tensor) -> torch.Tensor:  # fmt: skip
    k_pool[slots] = k
    v_pool[slots] = v
    return q * v_pool[slots].mean() + k_pool[slots].mean()


@write_attend.register_fake
def _(q, k, v, k_pool, v_pool, slots):  # type: ignore[no-untyped-def]
    return torch.empty_like(q)


class Block(nn.Module):
    def __init__(self, k_pool: torch.Tensor, v_pool: torch.Tensor) -> None:
        super().__init__()
        self.k_pool, self.v_pool = k_pool, v_pool
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return x + torch.ops.repro_test.write_attend(q, k, v, self.k_pool, self.v_pool, slots)


class Model(nn.Module):
    _repeated_blocks: ClassVar[list[str]] = ["Block"]

    def __init__(self, fused: bool) -> None:
        super().__init__()
        shape = (256, 16)  # 16 KiB per pool
        pairs = [torch.zeros(2, *shape).unbind(0) if fused else (torch.zeros(shape), torch.zeros(shape)) for _ in "ab"]
        self.pools = {f"layer{i}.{n}": t for i, pair in enumerate(pairs) for n, t in zip("kv", pair, strict=True)}
        self.blocks = nn.ModuleList(Block(*pair) for pair in pairs)

    def forward(self, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, slots)
        return x


def _case(name: str, fused: bool) -> Case:
    torch.manual_seed(0)
    model = Model(fused).requires_grad_(False)

    def regionally_compile(backend: Any) -> Model:
        for module in model.modules():
            if type(module).__name__ in model._repeated_blocks:
                module.forward = torch.compile(module.forward, backend=backend, dynamic=True)
        return model

    def drive(step: Any) -> list[torch.Tensor]:
        return [step(torch.ones(n, 16), torch.arange(n) + 8 * c) for c, n in enumerate((4, 6))]

    return Case(name, model, compile=regionally_compile, driver=drive, pools=model.pools, expect_clean=not fused)


def cases() -> list[Case]:
    return [_case("split", fused=False), _case("fused", fused=True)]
