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


# ---- the gate's own settings and verdicts (tests/test_repro.py's second half) ------------------------------------


def fused_kv_step(kv: torch.Tensor, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """One (2, N, D) allocation passed whole and sliced inside: reinplaced under auto_functionalized v2 only."""
    k_pool, v_pool = kv[0], kv[1]
    return torch.ops.repro_test.write_attend(x, x + 1, x - 1, k_pool, v_pool, slots)


def _fused_kv(name: str, functionalization: str) -> Case:
    kv, slots = torch.zeros(2, 64, 16), torch.arange(4)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    return Case(
        name, fused_kv_step, args=(kv, x, slots), pools={"kv": kv}, driver=lambda step: step(kv, x, slots),
        functionalization=functionalization, expect_clean=functionalization == "v2",  # type: ignore[arg-type]
    )  # fmt: skip


def counted_step(k_pool: torch.Tensor, v_pool: torch.Tensor, counter: torch.Tensor, x: torch.Tensor,
                 slots: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The step writes its pools through the op, and an 8-byte step counter."""
    counter.add_(1)
    return torch.ops.repro_test.write_attend(x, x + 1, x - 1, k_pool, v_pool.view(torch.float32), slots)


def _counted(name: str, arena: bool) -> Case:
    """Clean: split pools. ``arena``: K (fp32) and V (fp16, read as fp32 by the op) carved from one byte arena,
    which shares a storage (a negative control: Inductor clones it)."""
    if arena:
        buf = torch.zeros(64 * 16 * 4 + 64 * 32 * 2, dtype=torch.uint8)
        k_pool = buf[: 64 * 16 * 4].view(torch.float32).view(64, 16)
        v_pool = buf[64 * 16 * 4 :].view(torch.float16).view(64, 32)
    else:
        k_pool, v_pool = torch.zeros(64, 16), torch.zeros(64, 32, dtype=torch.float16)
    counter, slots = torch.zeros(1, dtype=torch.int64), torch.arange(4)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    args = (k_pool, v_pool, counter, x, slots)
    pools = {"k": k_pool, "v": v_pool}
    return Case(name, counted_step, args=args, pools=pools, driver=lambda step: step(*args), expect_clean=not arena)


@torch.library.custom_op("repro_test::commit_undeclared", mutates_args=())
def commit_undeclared(k_pool: torch.Tensor, k: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    k_pool[slots] = k
    return k.new_empty(0)


@commit_undeclared.register_fake
def _(k_pool, k, slots):  # type: ignore[no-untyped-def]
    return k.new_empty(0)


def lost_step(k_pool: torch.Tensor, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The write op declares no mutation and its dummy is unused: AOT drops it (the gate's lost_write)."""
    commit_undeclared(k_pool, x, slots)
    return x * 2


def _lost() -> Case:
    k_pool, slots = torch.zeros(64, 16), torch.arange(4)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    return Case("lost", lost_step, args=(k_pool, x, slots), pools={"k": k_pool}, driver=lambda s: s(k_pool, x, slots))


def settings_cases() -> list[Case]:
    return [
        _fused_kv("fused_kv_v1", "v1"), _fused_kv("fused_kv_v2", "v2"), _counted("counter", arena=False),
        _counted("arena", arena=True), _lost(),
    ]  # fmt: skip
