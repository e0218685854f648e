"""One explanation per group of copies it explains alike: ``layers 0-2: <why>`` instead of three copies of it.

Torch-free (the gate's table reads plain outcome dicts). Two explanations are alike when they differ
only in layer numbers, K or V, numbered pool names, byte counts, region numbers and the numbering of FX
node names (``layer0.v`` / ``layer1.k``, ``(l0.v)`` / ``(l1.v)``, `` `k_pool` `` / `` `v_pool` ``,
``8192 bytes`` / ``16384 bytes``,
``region 5`` / ``region 9``, `` `index` `` / `` `index_3` ``): one cause, one fix, per layer and pool.
Each copy keeps its own line with its own pool, bytes and node; the shared explanation is printed
once, as worded for the group's first copy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_LAYER = re.compile(r"layer(\d+)")
_ALIKE = (
    (re.compile(r"layer\d+(\.[kv]\b)?"), "layer#"),  # a layer's pool: layer3.v
    # any other numbered pool name, as explanations write one: `v_pool` (l0.v), (blocks.3.attn.k_cache)
    (re.compile(r"\((?=[\w.]*\d)(?=[\w.]*\.)[A-Za-z_][\w.]*\)"), "(pool#)"),
    (re.compile(r"`[kv]_pool`"), "`#_pool`"),  # the op's argument: K or V alike
    (re.compile(r"`([A-Za-z_]*[A-Za-z])(?:_\d+)?`"), r"`\1_#`"),  # an FX node: `index` / `index_3`
    (re.compile(r"\b\d+ bytes\b"), "# bytes"),
    (re.compile(r"\bregion \d+"), "region #"),
)


def alike(text: str) -> str:
    """``text`` with layer numbers and byte counts blanked: the grouping key."""
    for pattern, sub in _ALIKE:
        text = pattern.sub(sub, text)
    return text


def _ranges(numbers: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    out: list[str] = []
    nums = sorted(set(numbers))
    start = prev = nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(out)


def group_label(pools: Sequence[str | None]) -> str:
    """``layers 0-2`` when every pool names a layer, else the pools themselves."""
    layers = [_LAYER.search(p) for p in pools if p]
    if pools and all(layers) and len(layers) == len(pools):
        nums = [int(m.group(1)) for m in layers if m]
        return f"layer{'s' if len(set(nums)) > 1 else ''} {_ranges(nums)}"
    return ", ".join(p or "<unnamed input>" for p in dict.fromkeys(pools))


def group_explanations(items: Sequence[tuple[str | None, str]]) -> list[tuple[str, str, int]]:
    """``(pool, explanation)`` per copy -> ``(label, explanation, copies)`` per group, in first-seen order."""
    groups: dict[str, list[tuple[str | None, str]]] = {}
    for pool, text in items:
        groups.setdefault(alike(text), []).append((pool, text))
    return [(group_label([p for p, _ in g]), g[0][1], len(g)) for g in groups.values()]


__all__ = ["alike", "group_explanations", "group_label"]
