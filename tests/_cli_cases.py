"""Tiny user case files for the CLI tests, written into tmp dirs as a user's engine would be.

``step`` gathers a window from the pools and commits a chunk through ``paged_write``: with
split K/V allocations Inductor re-inplaces the write (clean); with K and V as views of one
(2, N, H, D) allocation it keeps a clone of the whole storage for ``v_pool`` (the bug).
"""

from __future__ import annotations

from pathlib import Path

ENGINE = '''
import torch
import ar_paging
from compile_checks import Case

N, H, D = 64, 2, 8


def step(k, v, x, slots, window):
    kw, vw = ar_paging.gather_window(k, v, window)
    torch.ops.ar_paging.paged_write(k, v, x * 2 + vw.mean(0), x + kw.mean(0), slots)
    return kw.sum() + vw.sum()


def make(name, fused, expect_clean, verify=None):
    if fused:
        kv = torch.zeros(2, N, H, D)
        k, v = kv[0], kv[1]
    else:
        k, v = torch.zeros(N, H, D), torch.zeros(N, H, D)
    x = torch.randn(16, H, D)
    return Case(name=name, fn=step, args=(k, v, x, torch.arange(32, 48), torch.arange(0, 32)),
                pools={"layer0.k": k, "layer0.v": v}, expect_clean=expect_clean, verify=verify)


def gate():
    """A clean split step and a fused negative control that must keep cloning."""
    return [make("split_step", False, True), make("fused_control", True, False)]


def regressed():
    """The engine switched to a fused allocation but still expects clean: the gate must fail."""
    return make("fused_expected_clean", True, True)


def lost_control():
    """A negative control whose bug went away: the check lost its power, the gate must fail."""
    return make("split_marked_control", False, False)


def wrong_numbers():
    """Clean, but the case's own eager comparison says the numbers differ."""
    return make("split_wrong_numbers", False, True, verify=lambda out: (False, 0.5))


SPLIT_INSTANCE = make("split_instance", False, True)
'''


def write_engine(folder: Path, name: str = "engine.py") -> Path:
    path = folder / name
    path.write_text(ENGINE)
    return path
