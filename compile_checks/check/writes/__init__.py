"""Writes that really happen: lost writes, undeclared writes, and vLLM's side-effect KV update.

The copy check trusts op schemas: a pool is written where an op declares ``(a!)``. Two ways
an engine's KV cache write escapes that:

* **undeclared write**: an opaque (non-ATen) op writes a named pool while its schema declares
  no mutation of it (vLLM's ``unified_kv_cache_update`` takes the cache from the forward
  context, ``mutates_args=[]``; engines copy it). Inductor sees a pure op: it may drop it
  (its dummy output unused, or read by nothing Inductor keeps), reorder it or CSE around it.
  :class:`RegionWriteWatch` runs every compiled graph (analysis-only FX run and Inductor's
  generated wrapper alike: both call opaque ops through the dispatcher) under a
  :class:`WriteWatcher` dispatch mode that checksums, around each opaque op call, the named pools
  that call can reach (:mod:`.reach`). Version counters cannot do this: under a dispatch mode the
  op's kernel is redispatched below ``ADInplaceOrView``, so an in-place ATen op inside it bumps no
  ``_version`` (torch 2.13: 0 -> 0 with a mode, 0 -> 1 without), so the watcher compares per-row
  checksums of the pool's bits (:mod:`.checksums`).
* **lost write**: a compiled call never wrote what its own graph writes eagerly (AOT autograd's dead-code
  elimination drops a no-mutation op whose output is unused before the post-grad graph; Inductor's
  lowering/codegen drops one whose output only feeds a size-0 reduction). :class:`CallWriteCheck`
  (:mod:`.calls`) wraps every compiled region: on each call it runs the region's captured dynamo graph
  eagerly on the call's own inputs under an undo log (:func:`eager_reference`, :mod:`.undo`: the
  pre-image of exactly what each op call writes), keeps the named pools' written elements, rolls every
  write back (RNG state included), runs the compiled code and :meth:`EagerReference.compare` reads the
  same elements: never written (exact), written differently (per-row tolerance; by written-ness where
  values depend on the RNG), or, on a region's first call, written elsewhere too (``diverged_state``
  when the two did not start from the same state). The host loop runs once: nothing is replayed.

vLLM's own pattern (``vllm::unified_kv_cache_update`` whose dummy output feeds
``vllm::unified_attention_with_output``) is recognised: its writes are attributed to the
forward-context pools and do not fail as undeclared; the case fails if the op's output no
longer feeds an op Inductor must keep, or (full codegen) the op is missing from Inductor's
generated code. vLLM's attention ops writing the cache themselves (a backend whose forward includes
the KV update) are recognised the same way (they declare ``output`` mutated: Inductor keeps them).

Cost: a compiled graph that calls no opaque op runs unwatched; one that does pays two per-row
checksums (a read each, O(rows) memory on the pool's device) of each pool an opaque call can reach:
those sharing storage with its arguments, every pool for an op reaching global state (vLLM's
KV-update and attention ops, :func:`register_global_state_ops`) and on each op's first call of a
session. The lost-write check costs one eager run of each compiled call under the undo log and memory
for what that call wrote (pre-images, eager's values, their offsets), plus, on each region's first
call, a checksum pass over the pools the call can reach.

Modules: :mod:`.ops` (which ops are trusted, what a call declares it writes), :mod:`.rows` (row
diffs), :mod:`.checksums` (per-row checksums), :mod:`.reach` (which pools an opaque call can reach),
:mod:`.watcher` (the dispatch mode), :mod:`.regions` (compiled regions: undeclared writes,
anchoring, generated code), :mod:`.footprint` (what one call writes; the registry for opaque ops),
:mod:`.undo` (the undo log), :mod:`.positions` (positions in a pool's own terms, per-dim checksums),
:mod:`.lost` (one eager run and its compare), :mod:`.calls` (the per-call check), :mod:`.finding` (what
they report). The names below
are the package's public face.
"""

from __future__ import annotations

from compile_checks.check.writes.calls import CallWriteCheck
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
from compile_checks.check.writes.reach import WriteReach, global_state_ops, register_global_state_ops
from compile_checks.check.writes.regions import OpaqueNode, RegionWrites, RegionWriteWatch, opaque_nodes
from compile_checks.check.writes.rows import changed_rows, row_bytes
from compile_checks.check.writes.watcher import ObservedWrite, WriteWatcher

# the old module's public names (its __all__ and the helpers it defined without an underscore)
__all__ = [
    "ROW_TOLERANCE",
    "TRUSTED_NAMESPACES",
    "VLLM_ATTENTION_OPS",
    "VLLM_KV_UPDATE_OPS",
    "CallWriteCheck",
    "EagerReference",
    "Footprint",
    "ObservedWrite",
    "OpaqueNode",
    "RegionWriteWatch",
    "RegionWrites",
    "WriteFinding",
    "WriteReach",
    "WriteWatcher",
    "changed_rows",
    "declared_mutations",
    "declares_write",
    "eager_reference",
    "global_state_ops",
    "is_opaque",
    "op_name",
    "opaque_nodes",
    "register_global_state_ops",
    "register_write_footprint",
    "row_bytes",
    "tensors_in",
]
