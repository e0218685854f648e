"""Writes that really happen: lost writes, undeclared writes, and vLLM's side-effect KV update.

The copy check trusts op schemas: a pool is written where an op declares ``(a!)``. Two ways
an engine's KV cache write escapes that:

* **undeclared write**: an opaque (non-ATen) op writes a named pool while its schema declares
  no mutation of it (vLLM's ``unified_kv_cache_update`` takes the cache from the forward
  context, ``mutates_args=[]``; engines copy it). Inductor sees a pure op: it may drop it
  (its dummy output unused, or read by nothing Inductor keeps), reorder it or CSE around it.
  :class:`RegionWriteWatch` runs every compiled graph (analysis-only FX run and Inductor's
  generated wrapper alike: both call opaque ops through the dispatcher) under a
  :class:`WriteWatcher` dispatch mode that diffs the named pools around each opaque op call.
  Version counters cannot do this: under a dispatch mode the op's kernel is redispatched below
  ``ADInplaceOrView``, so an in-place ATen op inside it bumps no ``_version`` (torch 2.13: 0 -> 0
  with a mode, 0 -> 1 without), so the watcher compares bytes against a shadow copy.
* **lost write**: the compiled run never wrote what eager wrote (AOT autograd's dead-code
  elimination drops a no-mutation op whose output is unused before the post-grad graph; Inductor's
  lowering/codegen drops one whose output only feeds a size-0 reduction). :func:`eager_reference`
  runs the case eagerly under an undo log (:mod:`.undo`: the pre-image of exactly what each op call
  writes, into any tensor that existed before), keeps the named pools' written elements, rolls every
  write back, and :meth:`EagerReference.compare` reads the same elements after the compiled run:
  never written (exact), written differently (per-row tolerance; by written-ness where values depend
  on the RNG), or written elsewhere too (``diverged_state``: the runs started apart).

vLLM's own pattern (``vllm::unified_kv_cache_update`` whose dummy output feeds
``vllm::unified_attention_with_output``) is recognised: its writes are attributed to the
forward-context pools and do not fail as undeclared; the case fails if the op's output no
longer feeds an op Inductor must keep, or (full codegen) the op is missing from Inductor's
generated code. vLLM's attention ops writing the cache themselves (a backend whose forward includes
the KV update) are recognised the same way (they declare ``output`` mutated: Inductor keeps them).

Cost: a compiled graph that calls no opaque op runs unwatched; one that does pays a copy and a
compare of every named pool around each opaque call (memory bandwidth, no compile). The lost-write
check costs one eager run of the case under the undo log and memory for the written elements
(pre-images, eager's values, their offsets), plus a few checksum passes over the pools.

Modules: :mod:`.ops` (which ops are trusted, what a call declares it writes), :mod:`.rows` (row
diffs), :mod:`.watcher` (the dispatch mode), :mod:`.regions` (compiled regions: undeclared writes,
anchoring, generated code), :mod:`.footprint` (what one call writes; the registry for opaque ops),
:mod:`.undo` (the undo log), :mod:`.positions` (positions in a pool's own terms, per-dim checksums),
:mod:`.lost` (lost writes, the eager reference), :mod:`.finding` (what they report). The names below
are the package's public face.
"""

from __future__ import annotations

from compile_checks.check.writes.finding import WriteFinding
from compile_checks.check.writes.footprint import Footprint, register_write_footprint
from compile_checks.check.writes.lost import ROW_TOLERANCE, EagerReference, eager_reference, tensors_in
from compile_checks.check.writes.ops import (
    TRUSTED_NAMESPACES,
    VLLM_ATTENTION_OPS,
    VLLM_KV_UPDATE_OPS,
    declared_mutations,
    declares_write,
    is_opaque,
    op_name,
)
from compile_checks.check.writes.regions import OpaqueNode, RegionWrites, RegionWriteWatch, opaque_nodes
from compile_checks.check.writes.rows import changed_rows, row_bytes
from compile_checks.check.writes.watcher import ObservedWrite, WriteWatcher

# the old module's public names (its __all__ and the helpers it defined without an underscore)
__all__ = [
    "ROW_TOLERANCE",
    "TRUSTED_NAMESPACES",
    "VLLM_ATTENTION_OPS",
    "VLLM_KV_UPDATE_OPS",
    "EagerReference",
    "Footprint",
    "ObservedWrite",
    "OpaqueNode",
    "RegionWriteWatch",
    "RegionWrites",
    "WriteFinding",
    "WriteWatcher",
    "changed_rows",
    "declared_mutations",
    "declares_write",
    "eager_reference",
    "is_opaque",
    "op_name",
    "opaque_nodes",
    "register_write_footprint",
    "row_bytes",
    "tensors_in",
]
