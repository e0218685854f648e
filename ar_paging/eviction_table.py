"""Chunk-window eviction, driven through vLLM's real ``BlockPool`` and KV-cache manager.

``eviction_table(...)`` runs one request chunk by chunk the way vLLM's scheduler
does (``remove_skipped_blocks`` on the committed tokens, then
``get_num_blocks_to_allocate`` / ``allocate_new_blocks`` for the next chunk) and
returns one row per chunk: the request's block table while chunk ``c`` is in
flight, which is also the table right after chunk ``c`` is committed (eviction
runs when the next chunk is scheduled).

Table legend, one symbol per block-table entry, chunks separated by a space:
``S`` sink block, ``W`` resident context block, ``C`` block of the in-flight
chunk, ``.`` vLLM's ``null_block`` (evicted).

    python -m ar_paging.eviction_table            # the default example, as Markdown
    python -m ar_paging.eviction_table 4 8 2 1 0 8
        # block_size chunk_size window_chunks sink_chunks reset_at_boundary num_chunks
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import torch
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.single_type_kv_cache_manager import SingleTypeKVCacheManager, get_manager_for_kv_cache_spec

from ar_paging.chunk_window import ChunkWindowSpec

REQUEST_ID = "req-0"


def make_spec(
    block_size: int,
    chunk_size: int,
    window_chunks: int,
    sink_chunks: int,
    reset_at_boundary: bool,
    *,
    num_kv_heads: int = 1,
    head_size: int = 8,
    dtype: torch.dtype = torch.float16,
) -> ChunkWindowSpec:
    """A ``ChunkWindowSpec`` with ``sliding_window = window_chunks * chunk_size``."""
    return ChunkWindowSpec(
        block_size=block_size,
        num_kv_heads=num_kv_heads,
        head_size=head_size,
        dtype=dtype,
        sliding_window=window_chunks * chunk_size,
        chunk_size=chunk_size,
        window_chunks=window_chunks,
        sink_chunks=sink_chunks,
        reset_at_boundary=reset_at_boundary,
    )


def make_manager(
    spec: ChunkWindowSpec,
    num_chunks: int,
    *,
    num_gpu_blocks: int | None = None,
    manager_class: type[SingleTypeKVCacheManager] | None = None,
) -> tuple[SingleTypeKVCacheManager, BlockPool]:
    """A fresh ``BlockPool`` (no prefix caching) and the manager vLLM resolves for ``spec``.

    ``manager_class`` bypasses the registry (tests use it for deliberately broken
    managers); by default the manager comes from ``get_manager_for_kv_cache_spec``.
    The pool is big enough to hold every chunk without eviction, plus the null block.
    """
    if num_chunks < 1:
        raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
    if num_gpu_blocks is None:
        num_gpu_blocks = num_chunks * (spec.chunk_size // spec.block_size) + 2
    pool = BlockPool(num_gpu_blocks=num_gpu_blocks, enable_caching=False, hash_block_size=spec.block_size)
    max_model_len = num_chunks * spec.chunk_size
    common = dict(block_pool=pool, enable_caching=False, kv_cache_group_id=0, scheduler_block_size=spec.block_size)
    if manager_class is None:
        manager = get_manager_for_kv_cache_spec(
            spec, max_in_flight_tokens=spec.chunk_size, max_model_len=max_model_len, **common
        )
    else:
        cap = spec.max_admission_blocks_per_request(max_in_flight_tokens=spec.chunk_size, max_model_len=max_model_len)
        manager = manager_class(spec, max_admission_blocks_per_request=cap, **common)
    return manager, pool


@dataclass(frozen=True)
class ChunkStep:
    """The request's state while chunk ``chunk`` is in flight (= right after it is committed)."""

    chunk: int
    num_computed_tokens: int  # committed tokens before this chunk
    block_ids: tuple[int, ...]  # the block table; the null block's id where evicted
    is_null: tuple[bool, ...]
    predicted_new_blocks: int  # get_num_blocks_to_allocate before the allocation
    new_block_ids: tuple[int, ...]  # what allocate_new_blocks handed out
    num_free_blocks: int  # BlockPool.get_num_free_blocks() after the allocation

    @property
    def held_block_ids(self) -> tuple[int, ...]:
        return tuple(b for b, null in zip(self.block_ids, self.is_null) if not null)


def step_chunks(
    manager: SingleTypeKVCacheManager, num_chunks: int, *, request_id: str = REQUEST_ID
) -> Iterator[ChunkStep]:
    """Schedule ``num_chunks`` chunks of one request, as vLLM's ``allocate_slots`` does."""
    chunk_size = manager.kv_cache_spec.chunk_size
    for c in range(num_chunks):
        computed = c * chunk_size
        manager.remove_skipped_blocks(request_id, computed)
        predicted = manager.get_num_blocks_to_allocate(
            request_id,
            num_tokens=computed + chunk_size,
            new_computed_blocks=[],
            total_computed_tokens=computed,
            num_local_computed_tokens=computed,
            num_tokens_main_model=computed + chunk_size,
        )
        new_blocks = manager.allocate_new_blocks(request_id, computed + chunk_size, computed + chunk_size)
        blocks = manager.req_to_blocks[request_id]
        yield ChunkStep(
            chunk=c,
            num_computed_tokens=computed,
            block_ids=tuple(b.block_id for b in blocks),
            is_null=tuple(bool(b.is_null) for b in blocks),
            predicted_new_blocks=predicted,
            new_block_ids=tuple(b.block_id for b in new_blocks),
            num_free_blocks=manager.block_pool.get_num_free_blocks(),
        )


def _layout(step: ChunkStep, blocks_per_chunk: int, sink_chunks: int) -> str:
    chunks = []
    for start in range(0, len(step.block_ids), blocks_per_chunk):
        chunk = start // blocks_per_chunk
        role = "S" if chunk < sink_chunks else "C" if chunk == step.chunk else "W"
        chunks.append("".join("." if step.is_null[i] else role for i in range(start, start + blocks_per_chunk)))
    return " ".join(chunks)


def eviction_table(
    block_size: int,
    chunk_size: int,
    window_chunks: int,
    sink_chunks: int,
    reset_at_boundary: bool,
    num_chunks: int,
) -> pd.DataFrame:
    """One row per chunk, from the real vLLM ``BlockPool`` + the manager it resolves.

    Columns: ``chunk``; ``committed`` (tokens committed once the chunk is);
    ``table`` (legend in the module docstring); ``block_ids`` (``-`` = null block);
    ``held`` (real blocks the request holds); ``free`` (the pool's free blocks).
    """
    spec = make_spec(block_size, chunk_size, window_chunks, sink_chunks, reset_at_boundary)
    manager, _pool = make_manager(spec, num_chunks)
    blocks_per_chunk = chunk_size // block_size
    rows = []
    try:
        for step in step_chunks(manager, num_chunks):
            rows.append(
                {
                    "chunk": step.chunk,
                    "committed": step.num_computed_tokens + chunk_size,
                    "table": _layout(step, blocks_per_chunk, sink_chunks),
                    "block_ids": " ".join("-" if n else str(b) for b, n in zip(step.block_ids, step.is_null)),
                    "held": len(step.held_block_ids),
                    "free": step.num_free_blocks,
                }
            )
    finally:
        manager.free(REQUEST_ID)
    return pd.DataFrame(rows, columns=["chunk", "committed", "table", "block_ids", "held", "free"])


def _main(argv: list[str]) -> None:
    if argv and len(argv) != 6:
        raise SystemExit(
            "usage: python -m ar_paging.eviction_table "
            "[block_size chunk_size window_chunks sink_chunks reset_at_boundary num_chunks]"
        )
    bs, cs, w, s, reset, n = (int(a) for a in argv) if argv else (4, 8, 2, 1, 0, 7)
    df = eviction_table(bs, cs, w, s, bool(reset), n)
    strategy = "reset_at_boundary" if reset else "sliding"
    print(f"block_size={bs} chunk_size={cs} window_chunks={w} sink_chunks={s} strategy={strategy} num_chunks={n}\n")
    print(df.to_markdown(index=False))


if __name__ == "__main__":
    _main(sys.argv[1:])
