"""Paging primitives of the AR-diffusion engine: slots, pools, the commit op, the read path, eviction.

The vLLM-backed names (``ChunkWindowSpec``, ``ChunkWindowManager``,
``chunk_window_skipped_tokens``) are imported on first use (PEP 562), so
``import ar_paging`` (and with it the commit op) does not import vLLM.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ar_paging.debug_checks import debug_checks_enabled, set_debug_checks
from ar_paging.lowering import lowering_enabled, set_lowering_enabled
from ar_paging.overlap import tensors_overlap
from ar_paging.paged_write import kernel as paged_write_kernel
from ar_paging.paged_write import paged_write, pool_write_chunk
from ar_paging.pool import PoolGeometry, allocate_kv_pool_with_views
from ar_paging.read_path import ResidentWindow, gather_window, read_window, resident_window
from ar_paging.slot_mapping import chunk_slot_mapping, compute_slot_mapping, resident_block_ids

if TYPE_CHECKING:
    from ar_paging.chunk_window import ChunkWindowManager, ChunkWindowSpec, chunk_window_skipped_tokens

_LAZY = {
    "ChunkWindowManager": "ar_paging.chunk_window",
    "ChunkWindowSpec": "ar_paging.chunk_window",
    "chunk_window_skipped_tokens": "ar_paging.chunk_window",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ar_paging' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ChunkWindowManager",
    "ChunkWindowSpec",
    "PoolGeometry",
    "ResidentWindow",
    "allocate_kv_pool_with_views",
    "chunk_slot_mapping",
    "chunk_window_skipped_tokens",
    "compute_slot_mapping",
    "debug_checks_enabled",
    "gather_window",
    "lowering_enabled",
    "paged_write",
    "paged_write_kernel",
    "pool_write_chunk",
    "read_window",
    "resident_block_ids",
    "resident_window",
    "set_debug_checks",
    "set_lowering_enabled",
    "tensors_overlap",
]
