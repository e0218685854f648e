"""The opt-in debug mode: data-dependent checks that cost a device-to-host sync.

Off by default, because ``paged_write`` runs inside compiled regions and CUDA
graphs, where a sync is either forbidden (capture) or a stall per call. Slots
made by ``ar_paging.slot_mapping`` are already range-checked on the host, where
they are Python ints. Turn it on while debugging a new caller:

    AR_PAGING_DEBUG=1 python ...            # at import time
    ar_paging.set_debug_checks(True)        # at run time
"""

from __future__ import annotations

import os
from collections.abc import Callable

_ENV_VAR = "AR_PAGING_DEBUG"
_enabled = os.environ.get(_ENV_VAR, "0").strip().lower() not in ("", "0", "false", "no", "off")
_listeners: list[Callable[[bool], object]] = []


def set_debug_checks(enabled: bool) -> None:
    """Turn the syncing checks (slot range, duplicate slots) on or off for this process."""
    global _enabled
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled must be a bool, got {enabled!r}")
    _enabled = enabled
    for listener in _listeners:
        listener(enabled)


def add_debug_checks_listener(listener: Callable[[bool], object]) -> None:
    """Call ``listener(enabled)`` now and on every switch: the C++ kernel keeps its own copy of the flag."""
    _listeners.append(listener)
    listener(_enabled)


def debug_checks_enabled() -> bool:
    return _enabled
