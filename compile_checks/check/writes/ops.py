"""Which ops the write checks trust, and what an op call declares it writes (read off its schema).

Apart because the dispatch-mode watcher and the post-grad graph walk ask the same questions of an op
(opaque? declares a write?) and must answer them the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch

from compile_checks.check.graph.fx_helpers import written_arguments

# namespaces whose ops' schemas are trusted: an op there writes only what it declares
TRUSTED_NAMESPACES: frozenset[str] = frozenset(
    {"aten", "prims", "inductor", "_c10d_functional", "c10d_functional", "profiler", "debugprims"}
)
# vLLM 0.33's side-effect KV write and the op its dummy output must feed (ordering + liveness)
VLLM_KV_UPDATE_OPS: frozenset[str] = frozenset({"vllm::unified_kv_cache_update", "vllm::unified_mla_kv_cache_update"})
# vLLM's attention ops: with a backend whose forward includes the KV update they write the forward
# context's cache themselves; they declare ``output`` mutated, so Inductor keeps them (a fallback with side effects)
VLLM_ATTENTION_OPS: frozenset[str] = frozenset(
    {"vllm::unified_attention_with_output", "vllm::unified_mla_attention_with_output"}
)


def op_name(func: Any) -> str:
    """``ns::name`` (``.overload`` dropped unless not default) of an OpOverload, else its repr."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return str(func)
    overload = schema.overload_name
    return f"{schema.name}.{overload}" if overload and overload != "default" else schema.name


def is_opaque(func: Any) -> bool:
    """An op whose body the check cannot see: a dispatcher op outside the trusted namespaces."""
    return isinstance(func, torch._ops.OpOverload) and _namespace(func) not in TRUSTED_NAMESPACES


# per op overload, not per call: the write watcher asks around every op an eager run dispatches (tens
# of thousands per case); an overload's namespace never changes (its written arguments: fx_helpers)
@functools.cache
def _namespace(func: torch._ops.OpOverload) -> str:
    return str(func.namespace)


def declared_mutations(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
    """The tensors an op call declares it writes (``Tensor(a!)`` arguments, lists flattened)."""
    out: list[torch.Tensor] = []
    for i, name in written_arguments(func):
        value = args[i] if i < len(args) else kwargs.get(name)
        values = value if isinstance(value, (list, tuple)) else [value]
        out += [v for v in values if isinstance(v, torch.Tensor)]
    return out


def declares_write(op: Any) -> bool:
    """Whether an op's schema declares a mutation of any argument."""
    return bool(written_arguments(op))


__all__ = [
    "TRUSTED_NAMESPACES",
    "VLLM_ATTENTION_OPS",
    "VLLM_KV_UPDATE_OPS",
    "declared_mutations",
    "declares_write",
    "is_opaque",
    "op_name",
]
