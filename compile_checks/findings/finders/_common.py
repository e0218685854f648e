"""What the finders share: a finding kind read tolerantly, and layers read from a pool's name."""

from __future__ import annotations

import re
from typing import Any

from compile_checks.vocab import FindingKind

_LAYER = re.compile(r"(?:^|[._])(?:layer|layers|block|blocks|l)[._]?(\d+)(?:[._]|$)")


def kind_of(value: Any, *, fails: bool) -> tuple[FindingKind, dict[str, Any]]:
    """``value`` as a :class:`FindingKind`; a kind this version does not know (a newer producer's) becomes
    ``undecided`` when it fails and ``note`` when not, its name kept in ``details["reported_kind"]``
    (and the renderers print it): never dropped, never passing by being unknown."""
    try:
        return FindingKind(str(value)), {}
    except ValueError:
        return (FindingKind.UNDECIDED if fails else FindingKind.NOTE), {"reported_kind": str(value)}


def copy_label(copy: Any) -> str:
    """What a copy (a mapping of its fields) is of: its pool, else the caller's tensor (``kv_cache['full_cache']``,
    ``input 3``); never the argument name of the op it feeds (an ATen write's ``self``)."""
    return str(copy.get("pool") or copy.get("input") or "an unnamed input")


def layers_of(pool: Any) -> tuple[int, ...]:
    """``layer3.v`` -> (3,); a pool name without a layer number -> ()."""
    m = _LAYER.search(str(pool or ""))
    return (int(m.group(1)),) if m else ()


__all__ = ["copy_label", "kind_of", "layers_of"]
