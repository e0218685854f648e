"""Paging primitives of the AR-diffusion engine: slots, pools, the commit op, the read path, eviction."""

from ar_paging.chunk_window import ChunkWindowManager, ChunkWindowSpec, chunk_window_skipped_tokens
from ar_paging.paged_write import paged_write, pool_write_chunk
from ar_paging.pool import PoolGeometry, allocate_kv_pool_with_views
from ar_paging.read_path import ResidentWindow, gather_window, read_window, resident_window
from ar_paging.slot_mapping import chunk_slot_mapping, compute_slot_mapping, resident_block_ids

__all__ = [
    "ChunkWindowManager",
    "ChunkWindowSpec",
    "PoolGeometry",
    "ResidentWindow",
    "allocate_kv_pool_with_views",
    "chunk_slot_mapping",
    "chunk_window_skipped_tokens",
    "compute_slot_mapping",
    "gather_window",
    "paged_write",
    "pool_write_chunk",
    "read_window",
    "resident_block_ids",
    "resident_window",
]
