"""Ops and steps for the eager reference's tests: a ``[B, H, L, D]`` cache written along L (transformers'
``StaticCache`` layout), writes that hide from the compiler, and an op whose kernel writes where no dispatch
mode sees it (what a C++ kernel does).

``hidden_seq_write`` writes ``CONTEXT["cache"]`` along dim 2 with ``mutates_args=()`` and returns a size-0
dummy: left unused, AOT autograd drops it (a lost write). ``unseen_write`` is defined with
``torch.library.Library`` and writes its ``(a!)`` pool's rows with every dispatch mode off, as a C++ kernel
would; ``sneaky_write`` writes ``CONTEXT["cache"]`` the same way without declaring it.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import _disable_current_modes

CONTEXT: dict[str, torch.Tensor] = {}


@torch.library.custom_op("w32_tests::hidden_seq_write", mutates_args=())
def hidden_seq_write(k: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    CONTEXT["cache"].index_copy_(2, pos, k)
    return k.new_empty(0)


@hidden_seq_write.register_fake
def _(k: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    return k.new_empty(0)


_LIB = torch.library.Library("w32_tests", "FRAGMENT")
_LIB.define("unseen_write(Tensor(a!) pool, Tensor rows, Tensor value) -> ()")
_LIB.define("sneaky_write(Tensor rows, Tensor value) -> Tensor")


def _unseen_write(pool: torch.Tensor, rows: torch.Tensor, value: torch.Tensor) -> None:
    with _disable_current_modes():
        pool.index_copy_(0, rows, value)


def _sneaky_write(rows: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    with _disable_current_modes():
        CONTEXT["cache"].index_copy_(0, rows, value)
    return value.new_empty(0)


_LIB.impl("unseen_write", _unseen_write, "CompositeExplicitAutograd")
_LIB.impl("sneaky_write", _sneaky_write, "CompositeExplicitAutograd")


def seq_write(cache: torch.Tensor, length: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """transformers' ``StaticLayer.update``: positions from a 0-dim tensor counter advanced in place."""
    pos = torch.arange(k.shape[2]) + length
    cache.index_copy_(2, pos, k)
    length.add_(k.shape[2])
    return cache.sum()


def seq_write_at(cache: torch.Tensor, pos: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The same write at positions the driver computes (from a Python int)."""
    cache.index_copy_(2, pos, k)
    return cache.sum()


def noisy_write(cache: torch.Tensor, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A diffusion-style step: the written values carry sampled noise."""
    y = x + 0.1 * torch.randn_like(x)
    cache.index_copy_(2, pos, y)
    return y.sum()


def noisy_write_dropped(cache: torch.Tensor, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """NEGATIVE CONTROL: the noisy write through an undeclared op whose dummy is unused (AOT drops it)."""
    y = x + 0.1 * torch.randn_like(x)
    hidden_seq_write(y, pos)
    return y.sum()


def dropped_seq_write(cache: torch.Tensor, pos: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """NEGATIVE CONTROL: the write along L through an undeclared op whose dummy is unused."""
    hidden_seq_write(k, pos)
    return k.sum()
