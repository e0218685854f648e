"""Ops for the write checks' tests: a KV update that hides its write (vLLM's pattern) and its declared twin.

``hidden_kv_update`` writes the cache it takes from ``CONTEXT`` (as vLLM's ``unified_kv_cache_update``
takes it from the forward context) with ``mutates_args=()`` and returns a size-0 dummy;
``attend`` takes the dummy to order itself after the write (vLLM's ``kv_cache_dummy_dep``).
``declared_kv_update`` is the same write declared: the cache is an argument in ``mutates_args``.
"""

from __future__ import annotations

import torch

CONTEXT: dict[str, torch.Tensor] = {}


@torch.library.custom_op("w17_tests::hidden_kv_update", mutates_args=())
def hidden_kv_update(k: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    CONTEXT["cache"].index_copy_(0, slots, k)
    return k.new_empty(0)


@hidden_kv_update.register_fake
def _(k: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    return k.new_empty(0)


@torch.library.custom_op("w17_tests::attend", mutates_args=())
def attend(q: torch.Tensor, dep: torch.Tensor) -> torch.Tensor:
    return q + CONTEXT["cache"].sum()


@attend.register_fake
def _(q: torch.Tensor, dep: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q)


@torch.library.custom_op("w17_tests::declared_kv_update", mutates_args=("cache",))
def declared_kv_update(cache: torch.Tensor, k: torch.Tensor, slots: torch.Tensor) -> None:
    cache.index_copy_(0, slots, k)


def dummy_unused(k: torch.Tensor, slots: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The lost write: the dummy is unused, AOT autograd's dead-code elimination drops the op."""
    hidden_kv_update(k, slots)
    return q * 2


def dummy_into_sum(k: torch.Tensor, slots: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The op survives the post-grad graph; Inductor's codegen folds the size-0 sum and drops it."""
    dummy = hidden_kv_update(k, slots)
    return q + dummy.sum()


def dummy_into_attention(k: torch.Tensor, slots: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """vLLM's pattern: the write really happens (the dummy feeds an opaque op), but undeclared."""
    dummy = hidden_kv_update(k, slots)
    return attend(q, dummy)


def declared_write(cache: torch.Tensor, k: torch.Tensor, slots: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Clean twin: the same write declared (the cache is a mutated argument)."""
    declared_kv_update(cache, k, slots)
    return q + cache.sum()


def aten_write(cache: torch.Tensor, k: torch.Tensor, slots: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Clean twin: an ``index_copy_`` cache update in the graph itself."""
    cache.index_copy_(0, slots, k)
    return q + cache.sum()


def accumulate(cache: torch.Tensor, k: torch.Tensor, slots: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """A write whose result depends on the state before it (a restore that failed would show twice)."""
    cache.index_add_(0, slots, k)
    return q * 2
