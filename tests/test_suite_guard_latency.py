"""Dynamo's guard-latency probe (_guard_latency): off in this session, off only inside the block."""

from __future__ import annotations

import os

import pytest
import torch
from _guard_latency import GUARD_LATENCY_ENV, guard_latency_unmeasured, unmeasured
from torch._dynamo import guards


def compile_a_new_frame() -> None:
    """One Dynamo compile of a function whose code object Dynamo has never seen (no cache entry)."""
    namespace: dict[str, object] = {}
    exec("def step(x):\n    return x * 2 + 1\n", namespace)  # a new code object per call
    torch.compile(namespace["step"], backend="eager", fullgraph=True)(torch.ones(4))


@pytest.mark.skipif(os.environ.get(GUARD_LATENCY_ENV) == "1", reason=f"{GUARD_LATENCY_ENV}=1: torch measures")
def test_this_session_compiles_without_measuring_guard_latency() -> None:
    assert guards.profile_guard_manager is unmeasured


def test_the_probe_is_skipped_inside_the_block_and_restored_after(monkeypatch: pytest.MonkeyPatch) -> None:
    probes: list[tuple] = []
    monkeypatch.setattr(guards, "profile_guard_manager", lambda *args: probes.append(args) or 1.0)
    compile_a_new_frame()
    assert len(probes) == 1  # negative control: without the block, Dynamo probes each compiled frame
    with guard_latency_unmeasured():
        compile_a_new_frame()
        compile_a_new_frame()
    assert len(probes) == 1
    compile_a_new_frame()
    assert len(probes) == 2  # restored on leaving
