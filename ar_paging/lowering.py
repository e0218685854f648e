"""An Inductor lowering of the re-inplaced ``paged_write``: Inductor's own scatter, fused with its producer.

Why: compiled, the opaque op needs the chunk's K/V (``x + ctx``) materialized in buffers, then a
wrapper-to-dispatcher call per layer (``torch.ops.ar_paging.paged_write.default(...)``); Inductor's
native ``index_copy_`` computes them inside its scatter loop instead (``python -m
reports.bench_hotpath compiled``). This lowering writes the pools with the lowering of
``aten.index_put_`` (``index_put_impl_``), so the producer fuses into the store.

When: at lowering time only, i.e. after the post-grad passes, the reinplacing and the
decomposition of ``auto_functionalized_v2``: the post-grad graph the compile checks read keeps the
``paged_write`` node, its ``only_clone_these_tensors`` and, when reinplacing fails, the clone of the
pool (the scatter then writes the cloned buffer, which Inductor still allocates and copies back).

Where it does not apply, the op stays a fallback call, constrained exactly as Inductor constrains
a custom op it has no lowering for: pools not on the CPU (CUDA keeps its Python kernel), debug checks
on at compile time (``ar_paging.debug_checks_enabled()``: the slot range/duplicate checks need the
kernel), ``AR_PAGING_LOWERING=0``. What the lowered path guarantees: shapes, dtypes and devices are
checked by the fake at trace time (the same ``_check_shapes``); each slot is bounds-checked by
Inductor's indirect-indexing assert (a ``RuntimeError`` "index out of bounds", negative slots
included) before its row is stored, but rows of earlier tokens may already be stored (the
kernels check every slot first, in debug mode only: without it their ``index_copy_`` fails at the
first bad slot too); no aliasing
check runs (Inductor tracks its buffers' reads and writes, and ``index_put_impl_`` realizes a source
that reads the pool it writes); duplicate slots are unchecked, as in the kernel without debug mode.

The choice is made when a graph is lowered and Inductor's FX graph cache does not key on it:
``set_lowering_enabled`` / ``set_debug_checks`` after a compile, or between runs sharing a cache,
need ``torch._dynamo.reset()`` and ``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`` (or a fresh cache dir).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ar_paging.debug_checks import debug_checks_enabled

ENV_VAR = "AR_PAGING_LOWERING"
_enabled = os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "off", "false", "no")
_registered = False


def set_lowering_enabled(enabled: bool) -> None:
    """Lower ``paged_write`` to Inductor's scatter (``True``, the default) or keep the fallback op call."""
    global _enabled
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled must be a bool, got {enabled!r}")
    _enabled = enabled


def lowering_enabled() -> bool:
    return _enabled


def ensure_registered() -> None:
    """Register the lowering with Inductor (once). Called from the op's fake: every compile traces it
    before Inductor lowers, and ``import ar_paging`` does not pay for importing Inductor."""
    global _registered
    if _registered:
        return
    from torch._inductor import lowering as inductor_lowering

    inductor_lowering.register_lowering(torch.ops.ar_paging.paged_write.default, type_promotion_kind=None)(
        _lower_paged_write
    )
    _registered = True


def _applies(k_pool: Any) -> bool:
    device = k_pool.get_device()
    return _enabled and not debug_checks_enabled() and device is not None and device.type == "cpu"


def _lower_paged_write(k_pool: Any, v_pool: Any, new_k: Any, new_v: Any, slot_mapping: Any) -> Any:
    from torch._inductor import lowering as inductor_lowering

    if not _applies(k_pool):
        return _fallback(k_pool, v_pool, new_k, new_v, slot_mapping)
    view = inductor_lowering.view
    slots = slot_mapping if len(slot_mapping.get_size()) == 1 else view(slot_mapping, [-1])
    slots = _negatives_out_of_range(slots, k_pool.get_size()[0])
    for pool, chunk in ((k_pool, new_k), (v_pool, new_v)):
        if len(chunk.get_size()) == 4:
            chunk = view(chunk, [-1, *chunk.get_size()[2:]])
        inductor_lowering.index_put_impl_(pool, [slots], chunk, False, check=True, may_realize=True)
    return ()


def _negatives_out_of_range(slots: Any, num_slots: Any) -> Any:
    """A negative slot becomes ``num_slots``, so the bounds assert refuses it: ``index_put_`` would
    wrap it (``-1``: the last slot) where the kernels' ``index_copy_`` refuses it. Fused, no buffer."""
    from torch._inductor import ir
    from torch._inductor.virtualized import ops

    load = slots.make_loader()

    def inner(index: Any) -> Any:
        slot = load(index)
        negative = ops.lt(slot, ops.constant(0, torch.int64))
        return ops.where(negative, ops.index_expr(num_slots, torch.int64), slot)

    return ir.Pointwise.create(
        device=slots.get_device(), dtype=torch.int64, inner_fn=inner, ranges=list(slots.get_size())
    )


def _fallback(*args: Any) -> Any:
    """The op call Inductor makes without a lowering (``GraphLowering.call_function``): the default
    layout constraint of a custom op applied to the inputs, then the fallback kernel."""
    from torch._inductor import lowering as inductor_lowering
    from torch._inductor.virtualized import V

    op = torch.ops.ar_paging.paged_write.default
    node = V.graph.current_node
    constraint = inductor_lowering.tag_to_layout_constraint(
        inductor_lowering.get_layout_constraint_tag(op, with_default=True)
    )
    old_args: tuple[Any, ...] = args
    kwargs: dict[str, Any] = {}
    if constraint is inductor_lowering.constrain_to_fake_tensors:
        if "eager_input_vals" in node.meta:
            fake_args, fake_kwargs = node.meta["eager_input_vals"]
            normalized = torch.fx.operator_schemas.normalize_function(op, fake_args, fake_kwargs)
            assert normalized is not None
            args, kwargs = constraint(args, {}, *normalized)
    elif constraint is not None:
        args, kwargs = constraint(node, *args)
    if args is not old_args:
        V.graph.propagate_mutation(node, old_args, {}, args, kwargs)
    return inductor_lowering.fallback_handler(op, add_to_fallback_set=False)(*args, **kwargs)
