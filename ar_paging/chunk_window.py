"""Chunk-window eviction on vLLM's KV-cache manager.

``ChunkWindowSpec`` is a ``SlidingWindowSpec`` whose unit is a chunk
(``sliding_window == window_chunks * chunk_size``); ``ChunkWindowManager`` frees
whole chunks between the leading attention-sink chunks and the window, and
replaces them with vLLM's ``null_block``. Refcounting and the free list stay in
vLLM's ``BlockPool``; only the token-skip arithmetic lives here.

Fixed against the reference spec:
* the sink was freed as ``sink_chunks`` *blocks*; it is
  ``sink_chunks * chunk_size // block_size`` blocks;
* a chunk boundary must be a block boundary (``chunk_size % block_size == 0``),
  and ``window_chunks >= 1``, ``sink_chunks >= 0``, ``chunk_size >= 1``;
* vLLM registers its built-in specs lazily, only while its registry is empty, so
  registering ours first would leave ``FullAttentionSpec`` & co. unregistered: the
  built-ins are registered before ours.
* the admission cap (blocks a request may hold) counts the sink blocks too;
* ``num_retained_tokens`` (how far back vLLM's GPU worker keeps block-table
  entries) would, inherited, null the sink on the worker side: overridden.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm.utils.math_utils import cdiv
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import SlidingWindowSpec
from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry


def chunk_window_skipped_tokens(
    num_computed_tokens: int,
    *,
    chunk_size: int,
    sliding_window: int,
    sink_chunks: int,
    reset_at_boundary: bool,
) -> int:
    """Tokens evicted *after the sink* (the gap), snapped to a chunk boundary.

    Tokens ``[0, sink)`` are the sink, ``[sink, sink + skipped)`` the gap, the rest
    is resident. Two strategies:

    * sliding (default): keep the last ``sliding_window`` completed tokens plus the
      sink; a chunk is never half-evicted.
    * ``reset_at_boundary``: at each chunk boundary everything past the sink that is
      complete is dropped (the next chunk sees only the sink).
    """
    if num_computed_tokens < 0:
        raise ValueError(f"num_computed_tokens must be non-negative, got {num_computed_tokens}")
    sink = sink_chunks * chunk_size
    if reset_at_boundary:
        completed = (num_computed_tokens // chunk_size) * chunk_size
        return max(0, completed - sink)
    skipped = max(0, num_computed_tokens - sliding_window - sink)
    return (skipped // chunk_size) * chunk_size


class ChunkWindowManager(SlidingWindowManager):
    """``SlidingWindowManager`` that evicts whole chunks and keeps the sink chunks."""

    kv_cache_spec: ChunkWindowSpec

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        spec = self.kv_cache_spec
        return chunk_window_skipped_tokens(
            num_computed_tokens,
            chunk_size=spec.chunk_size,
            sliding_window=self.sliding_window,
            sink_chunks=spec.sink_chunks,
            reset_at_boundary=spec.reset_at_boundary,
        )

    def remove_skipped_blocks(
        self,
        request_id: str,
        processed_computed_tokens: int,
        num_prompt_tokens: int | None = None,
    ) -> None:
        """Free the gap blocks ``[sink_blocks, sink_blocks + gap_blocks)``."""
        del num_prompt_tokens
        num_skipped_tokens = self.get_num_skipped_tokens(processed_computed_tokens)
        if num_skipped_tokens <= 0:
            return
        sink_blocks = self.kv_cache_spec.sink_blocks
        gap_blocks = num_skipped_tokens // self.block_size
        self._remove_blocks_in_range(request_id, sink_blocks, sink_blocks + gap_blocks)


@dataclass(frozen=True, kw_only=True)
class ChunkWindowSpec(SlidingWindowSpec):
    """Sliding window measured in chunks, with optional attention-sink chunks.

    ``sliding_window`` (inherited) must equal ``window_chunks * chunk_size``.
    ``uniform_type_base_spec=None``: its own KV-cache group (resolved to
    ``ChunkWindowManager``, not the parent ``SlidingWindowManager``).
    """

    chunk_size: int
    window_chunks: int
    sink_chunks: int = 0
    reset_at_boundary: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, value, low in (
            ("chunk_size", self.chunk_size, 1),
            ("window_chunks", self.window_chunks, 1),
            ("sink_chunks", self.sink_chunks, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"ChunkWindowSpec.{name} must be an int >= {low}, got {value!r}")
        if self.block_size < 1:
            raise ValueError(f"ChunkWindowSpec.block_size must be >= 1, got {self.block_size}")
        if self.chunk_size % self.block_size != 0:
            raise ValueError(
                f"ChunkWindowSpec.chunk_size ({self.chunk_size}) must be a multiple of block_size "
                f"({self.block_size}): a chunk boundary must be a block boundary, or eviction would "
                f"free half a chunk"
            )
        if self.sliding_window != self.window_chunks * self.chunk_size:
            raise ValueError(
                "ChunkWindowSpec.sliding_window must equal window_chunks * chunk_size "
                f"({self.window_chunks} * {self.chunk_size}), got {self.sliding_window}"
            )

    @property
    def num_retained_tokens(self) -> int:
        """How far below a request's first scheduled token vLLM's worker keeps table entries.

        vLLM's GPU worker (``vllm/v1/worker/gpu/block_table.py``,
        ``gather_block_tables``) nulls every *leading* block-table entry wholly below
        ``first_pos - num_retained_tokens`` for ``SlidingWindowSpec`` groups (``0``
        disables that). The inherited ``sliding_window - 1`` would null the sink
        blocks (they are leading entries far below the window) and, with
        ``block_size == 1``, the window's first token. So: ``0`` (no worker-side
        masking; the manager's ``null_block`` entries already mark the gap) with a
        sink or with ``reset_at_boundary``; otherwise the whole window,
        ``sliding_window + extra_retained_tokens`` (the in-flight chunk starts on a
        chunk boundary, so this nulls exactly the evicted chunks).
        """
        if self.sink_chunks > 0 or self.reset_at_boundary:
            return 0
        return self.sliding_window + self.extra_retained_tokens

    @property
    def sink_blocks(self) -> int:
        """Leading blocks that are never evicted."""
        return self.sink_chunks * self.chunk_size // self.block_size

    def max_admission_blocks_per_request(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """vLLM's sliding-window cap plus the sink blocks the window manager never frees."""
        window_cap = super().max_admission_blocks_per_request(max_in_flight_tokens, max_model_len)
        return min(window_cap + self.sink_blocks, cdiv(max_model_len, self.block_size) + 1)


def register_chunk_window_spec() -> None:
    """Register ``ChunkWindowSpec -> ChunkWindowManager`` without losing vLLM's built-ins.

    vLLM fills its registry with the built-in specs (``FullAttentionSpec`` & co.)
    lazily, in ``KVCacheSpecRegistry._ensure_registered``, and only while the
    registry is *empty*. A plain ``@register_kv_cache_spec`` on our class, run at
    import time before anything has touched the registry, makes it non-empty first:
    the built-ins are then never registered and ``FullAttentionSpec`` resolves to no
    manager. So the built-ins are registered first, then ours. Idempotent.
    ``uniform_type_base_spec=None``: its own KV-cache group.
    """
    KVCacheSpecRegistry._ensure_registered()
    KVCacheSpecRegistry.register(ChunkWindowSpec, manager_class=ChunkWindowManager, uniform_type_base_spec=None)


register_chunk_window_spec()
