"""The Wan-14B-like engine's gate at production size, on a runner that cannot allocate it.

- ``split``: K and V pools of every block are separate allocations: no copy survives.
- ``fused``: K and V of every block are two views of one allocation: the V pool of every block is
  copied on every call (the negative control: 40 copies of 64 MB per step).

Built ``with torch.device("meta"):`` (:func:`cases`) or under one ``FakeTensorMode`` (:func:`fake_cases`):
nothing is allocated, and the gate gives the analysis-only verdict. :func:`build_case` also builds a
case on real tensors, which at a small width (``WAN_SMALL``) the tests compare with the meta one.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from wan_dit import WAN_14B, WAN_SMALL, KVCache, WanConfig, WanDiT, compile_blocks, rollout

from compile_checks import Case
from compile_checks.pools import pools_from_module

STORAGES = ("meta", "fake", "real")


def _building(storage: str) -> contextlib.AbstractContextManager[Any]:
    if storage == "meta":
        return torch.device("meta")
    if storage == "fake":
        return FakeTensorMode()
    if storage == "real":
        return contextlib.nullcontext()
    raise ValueError(f"storage must be one of {STORAGES}, got {storage!r}")


def build_case(name: str, *, layout: str, cfg: WanConfig = WAN_14B, storage: str = "meta", frames: int = 1) -> Case:
    """One denoising step per frame of the model compiled per block, its pools named in its cache."""
    with _building(storage):
        cache = KVCache(cfg, layout)
        model = WanDiT(cfg, cache).eval().requires_grad_(False)
        noise = torch.randn(frames, cfg.frame_tokens, cfg.dim, dtype=cfg.dtype)
        text = torch.randn(cfg.text_tokens, cfg.text_dim, dtype=cfg.dtype)
    names = {f"layers.{i}.{kv}": f"layer{i}.{kv}" for i in range(cfg.num_layers) for kv in "kv"}
    return Case(
        name=name,
        fn=model,
        compile=lambda backend: compile_blocks(model, backend),  # per block, in place: the driver calls model
        pools=lambda: pools_from_module(cache, names=names),
        driver=rollout(cfg, noise, text, frames),
        expect_clean=layout == "split",
        description=f"{cfg.num_layers} blocks of width {cfg.dim} ({storage}), compiled one by one, {layout} pools",
    )


def cases() -> list[Case]:
    """Production size, built on meta."""
    return [build_case("split", layout="split"), build_case("fused", layout="fused")]


def fake_cases() -> list[Case]:
    """Production size, built under FakeTensorMode."""
    return [build_case("split", layout="split", storage="fake"), build_case("fused", layout="fused", storage="fake")]


def small_cases() -> list[Case]:
    """The same structure at a width real tensors fit (``WAN_SMALL``), built on meta: a quick smoke."""
    return [
        build_case("split", layout="split", cfg=WAN_SMALL),
        build_case("fused", layout="fused", cfg=WAN_SMALL),
    ]
