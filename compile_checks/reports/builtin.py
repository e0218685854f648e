"""The built-in report set: the registry's scenarios plus pool-size variants of split and fused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

# Pool-size variants of the registry's scenarios (same model, more blocks): total MiB of pool.
POOL_VARIANTS: tuple[tuple[str, int], ...] = (
    ("split", 16),
    ("fused", 16),
    ("split", 64),
    ("fused", 64),
    ("split", 256),
    ("fused", 256),
)
# The default built-in report, in table order: the clean split layout, the fused negative
# control, and both at growing pool sizes (1, 16, 64 MiB).
PREFERRED_DEFAULT: tuple[str, ...] = ("split", "fused", "fused_pool16MiB", "split_pool64MiB", "fused_pool64MiB")


def pool_variant_name(base: str, total_mib: int) -> str:
    return f"{base}_pool{total_mib}MiB"


def with_pool_variants(registry: Mapping[str, Any]) -> dict[str, Any]:
    """The registry plus ``<base>_pool<N>MiB`` copies of its scenarios resized to N MiB of pool."""
    out = dict(registry)
    for base, mib in POOL_VARIANTS:
        s = registry.get(base)
        if s is None or not hasattr(s, "total_pool_bytes"):
            continue
        num_blocks = max(1, (mib << 20) // (s.total_pool_bytes // s.num_blocks))
        name = pool_variant_name(base, mib)
        out[name] = replace(
            s,
            name=name,
            num_blocks=num_blocks,
            description=f"{base} with a {mib} MiB pool ({num_blocks} blocks): same window, same ideal",
        )
    return out


def default_scenario_names(registry: Mapping[str, Any], gate: Sequence[str]) -> list[str]:
    """The preferred report set that the registry has; the gate when none of it is there."""
    return [n for n in PREFERRED_DEFAULT if n in registry] or [n for n in gate if n in registry]


def unknown_scenarios(requested: Sequence[str], registry: Mapping[str, Any]) -> list[str]:
    return [n for n in requested if n not in registry]
