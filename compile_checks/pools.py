"""Name the pools where engines keep them: module trees, cache objects, vLLM's forward context.

``Case(pools=...)`` wants ``{"layer0.k": tensor, ...}``. Engines keep those tensors in module
buffers, private cache objects, NamedTuples (vLLM-Omni) or on the attention layers of vLLM's
forward context (``attn_layer.kv_cache``, bound after the model is built). Each helper here
returns a fresh mapping; wrap it in a zero-argument callable (``pools=lambda: pools_from_module(
model, "*.k_cache")``) to have it re-read at each call, so rebuilt tensors are followed.

Invariant (:func:`validate_pools`): a tensor is named once, and no two names share an element of
memory (decided by strides: interleaved views such as ``kv[:, 0]`` / ``kv[:, 1]`` of one storage are
disjoint); a violation is a :class:`PoolNamingError`, never a silently dropped name. Storages are told
apart by their own identity (:func:`~compile_checks.check.storage_identity.storage_key`), so pools built
on ``meta`` or under ``FakeTensorMode`` (all at address 0) are named as real ones are.
"""

from __future__ import annotations

import fnmatch
import functools
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from compile_checks.check.graph.geometry import StorageRef
from compile_checks.check.graph.overlap import views_overlap
from compile_checks.check.storage_identity import storage_key
from compile_checks.errors import CompileChecksError

PoolsArg = Mapping[str, torch.Tensor] | Callable[[], Mapping[str, torch.Tensor]] | None


class PoolNamingError(CompileChecksError, ValueError):
    """A pool named twice, a name bound to a tensor overlapping another pool, or a bad path."""


def validate_pools(pools: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The mapping as a dict, after checking every value is a tensor named once, none overlapping."""
    out: dict[str, torch.Tensor] = {}
    # pools grouped by storage (its identity, not its address: every meta / fake storage reports address 0):
    # only pools of one storage can overlap, so each pool is keyed once and compared within its group
    by_storage: dict[tuple[torch.device, int], list[tuple[str, torch.Tensor]]] = {}
    for name, t in pools.items():
        if not isinstance(name, str) or not name:
            raise PoolNamingError(f"pool names must be non-empty strings, got {name!r}")
        if not isinstance(t, torch.Tensor):
            raise PoolNamingError(f"pool {name!r} is a {type(t).__name__}, not a tensor")
        seen = by_storage.setdefault((t.device, storage_key(t)), [])
        for other, u in seen:
            ref, uref = StorageRef.of(t), StorageRef.of(u)
            # by elements, not byte span: kv[:, 0] / kv[:, 1] of a (blocks, 2, ...) cache interleave, sharing none
            if views_overlap(ref.geometry, uref.geometry):
                (lo, hi), (ulo, uhi) = ref.byte_span(), uref.byte_span()
                same = (lo, hi, tuple(t.shape), t.stride()) == (ulo, uhi, tuple(u.shape), u.stride())
                why = "is the same tensor as" if same else "overlaps"
                raise PoolNamingError(
                    f"pool {name!r} {why} pool {other!r} (bytes [{lo}, {hi}) vs [{ulo}, {uhi}) of one storage); "
                    "name each buffer once: a copy would be attributed to only one of the names"
                )
        seen.append((name, t))
        out[name] = t
    return out


def resolve_pools(pools: PoolsArg) -> dict[str, torch.Tensor] | None:
    """``pools`` as passed to a Case or CloneCheck (a mapping, a zero-argument callable, None), validated."""
    if pools is None:
        return None
    if callable(pools) and not isinstance(pools, Mapping):
        got = pools()
        if not isinstance(got, Mapping):
            raise PoolNamingError(f"the pools callable returned a {type(got).__name__}, expected a mapping")
        return validate_pools(got)
    return validate_pools(pools)


def _walk(obj: Any, path: str) -> Any:
    """``obj.a.b[0].c`` for the dotted path ``a.b.0.c`` (attributes, then int/str keys)."""
    cur = obj
    for part in path.split("."):
        if hasattr(cur, part):
            cur = getattr(cur, part)
        elif isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        elif part.lstrip("-").isdigit() and isinstance(cur, (list, tuple, torch.nn.ModuleList, torch.nn.Sequential)):
            cur = cur[int(part)]
        else:
            raise PoolNamingError(f"no {part!r} in {type(cur).__name__} (path {path!r})")
    return cur


def _is_namedtuple(obj: Any) -> bool:
    """A NamedTuple instance: its *class* has a tuple of string ``_fields`` (``unittest.mock.call`` answers any
    attribute, ``_fields`` included, and is no NamedTuple)."""
    fields = getattr(type(obj), "_fields", None)
    return isinstance(obj, tuple) and isinstance(fields, tuple) and all(isinstance(f, str) for f in fields)


# the interpreter's objects: never walked into (a cache holding ``torch.cpu`` as its ``device_module`` would lead
# into ``sys.modules``), nor callables and classes, which hold no pool of the object they hang on
_NOT_WALKED = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
    functools.partial,
    str,
    bytes,
    int,
    float,
    complex,
    bool,
    type(None),
    torch.device,
    torch.dtype,
)


def _children(obj: Any) -> Iterable[tuple[str, Any]]:
    """What discovery walks under ``obj``: module buffers and children, mapping items, NamedTuple fields,
    sequence items, an object's own attributes; nothing under anything else."""
    if isinstance(obj, torch.nn.Module):
        return [
            *obj.named_buffers(recurse=False),
            *obj.named_children(),
            *((k, v) for k, v in vars(obj).items() if not k.startswith("_") and not isinstance(v, torch.nn.Module)),
        ]
    if isinstance(obj, Mapping):
        return [(str(k), v) for k, v in obj.items()]
    if _is_namedtuple(obj):
        return [(f, getattr(obj, f)) for f in type(obj)._fields]
    if isinstance(obj, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(obj)]
    own = getattr(obj, "__dict__", None)
    if isinstance(own, dict):
        return [(k, v) for k, v in own.items() if isinstance(k, str) and not k.startswith("__")]
    return []


def _tensor_leaves(
    obj: Any, prefix: str, depth: int, seen: set[int], skipped: list[str] | None = None
) -> Iterable[tuple[str, torch.Tensor]]:
    """Every tensor reachable from ``obj`` by attribute / key / index, with its dotted path.

    Walks tensors and containers (modules, mappings, NamedTuples, sequences, objects' own attributes),
    never modules of the interpreter, classes or callables; an object whose contents cannot be listed is
    passed over and its path added to ``skipped`` (said in the error of a pattern that matches nothing).
    """
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
        return
    if depth <= 0 or id(obj) in seen or isinstance(obj, _NOT_WALKED):
        return
    seen.add(id(obj))
    try:
        children = _children(obj)
    except Exception as e:  # a container whose items raise: passed over, said, never a crash of discovery
        if skipped is not None:
            skipped.append(f"{prefix or '<root>'} ({type(obj).__name__}: {type(e).__name__})")
        return
    for key, value in children:
        yield from _tensor_leaves(value, f"{prefix}.{key}" if prefix else key, depth - 1, seen, skipped)


def pools_from_module(
    root: Any, *patterns: str, names: Mapping[str, str] | None = None, max_depth: int = 12
) -> dict[str, torch.Tensor]:
    """Pools found under ``root`` (a module, cache object, NamedTuple or mapping) by dotted path.

    ``patterns`` are ``fnmatch`` globs over the dotted paths of every reachable tensor
    (``"blocks.*.attn.k_cache"``, ``"kv_cache.*"``); a pattern that matches nothing is an error.
    ``names`` maps an exact dotted path to the pool name to use (``{"blocks.0.attn.k_cache":
    "layer0.k"}``); paths not in it are named by their path.
    """
    names = dict(names or {})
    if not patterns and not names:
        raise PoolNamingError("pools_from_module needs glob patterns or a names mapping")
    out: dict[str, torch.Tensor] = {}
    for path, new_name in names.items():
        t = _walk(root, path)
        if not isinstance(t, torch.Tensor):
            raise PoolNamingError(f"{path!r} is a {type(t).__name__}, not a tensor")
        out[new_name] = t
    if patterns:
        skipped: list[str] = []
        leaves = list(_tensor_leaves(root, "", max_depth, set(), skipped))
        for pattern in patterns:
            hits = [(p, t) for p, t in leaves if fnmatch.fnmatchcase(p, pattern)]
            if not hits:
                sample = ", ".join(p for p, _ in leaves[:8]) or "none"
                raise PoolNamingError(
                    f"pattern {pattern!r} matches no tensor under {type(root).__name__} "
                    f"(tensors found: {sample}{', ...' if len(leaves) > 8 else ''})"
                    + (f"; passed over, their contents could not be listed: {', '.join(skipped)}" if skipped else "")
                )
            for path, t in hits:
                out.setdefault(names.get(path, path), t)
    return validate_pools(out)


def pools_from_tensors(tensors: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Pools from a mapping or NamedTuple of tensors (vLLM-Omni's split flat pools): ``prefix.field``."""
    if _is_namedtuple(tensors):
        items = [(f, getattr(tensors, f)) for f in type(tensors)._fields]
    elif isinstance(tensors, Mapping):
        items = [(str(k), v) for k, v in tensors.items()]
    else:
        raise PoolNamingError(f"expected a mapping or NamedTuple of tensors, got {type(tensors).__name__}")
    return validate_pools({f"{prefix}.{k}" if prefix else k: v for k, v in items})


def split_kv_cache(name: str, kv_cache: Any, kv_dim: int | None = 0) -> dict[str, torch.Tensor]:
    """``{name.k, name.v}`` from a fused cache (size 2 along ``kv_dim``) or a (k, v) pair; else ``{name}``.

    ``kv_dim=1`` splits FlashInfer's ``(num_blocks, 2, block_size, heads, dim)`` into two interleaved views
    (disjoint by elements); ``kv_dim=None`` takes whichever of dims 0 and 1 has size 2 (an error when both do).
    """
    pair = isinstance(kv_cache, (list, tuple)) and len(kv_cache) == 2
    if pair and all(isinstance(t, torch.Tensor) for t in kv_cache):
        return {f"{name}.k": kv_cache[0], f"{name}.v": kv_cache[1]}
    if not isinstance(kv_cache, torch.Tensor):
        raise PoolNamingError(f"{name}: kv_cache is a {type(kv_cache).__name__}, not a tensor or a (k, v) pair")
    if kv_dim is None:
        twos = [d for d in (0, 1) if kv_cache.dim() > d and kv_cache.shape[d] == 2]
        if len(twos) > 1:
            raise PoolNamingError(
                f"{name}: kv_cache {tuple(kv_cache.shape)} has size 2 in dims 0 and 1; pass kv_dim=0 "
                "((2, num_blocks, ...) layouts) or kv_dim=1 ((num_blocks, 2, ...), FlashInfer's)"
            )
        kv_dim = twos[0] if twos else 0
    if kv_cache.dim() > kv_dim and kv_cache.shape[kv_dim] == 2:
        return {f"{name}.k": kv_cache.select(kv_dim, 0), f"{name}.v": kv_cache.select(kv_dim, 1)}
    return {name: kv_cache}


def pools_from_forward_context(
    context: Any, *, layers: Iterable[str] | None = None, kv_dim: int | None = 0
) -> dict[str, torch.Tensor]:
    """Pools of vLLM's attention layers: ``layer_name.k`` / ``.v`` from each ``attn_layer.kv_cache``.

    ``context`` is a ``VllmConfig`` (its ``compilation_config.static_forward_context``), a
    ``ForwardContext`` (``no_compile_layers``) or the ``{layer_name: layer}`` dict itself. A fused
    cache (size 2 along ``kv_dim``, vLLM's ``(2, num_blocks, block_size, heads, dim)``) is split into
    its K and V halves; ``kv_dim=1`` splits FlashInfer's ``(num_blocks, 2, block_size, heads, dim)`` into
    two interleaved views, ``kv_dim=None`` finds the dim per layer (:func:`split_kv_cache`). A layer
    whose cache is still vLLM's unbound placeholder (0 elements) is an error: name the pools after
    ``bind_kv_cache`` ran.
    """
    if hasattr(context, "compilation_config"):
        table = context.compilation_config.static_forward_context
    elif hasattr(context, "no_compile_layers"):
        table = context.no_compile_layers
    elif isinstance(context, Mapping):
        table = context
    else:
        raise PoolNamingError(f"expected a VllmConfig, ForwardContext or layer dict, got {type(context).__name__}")
    wanted = list(layers) if layers is not None else [n for n, layer in table.items() if hasattr(layer, "kv_cache")]
    out: dict[str, torch.Tensor] = {}
    for layer_name in wanted:
        if layer_name not in table:
            raise PoolNamingError(f"no layer {layer_name!r} in the forward context (has: {', '.join(table)})")
        kv_cache = getattr(table[layer_name], "kv_cache", None)
        if isinstance(kv_cache, list) and len(kv_cache) == 1:  # older vLLM: one cache per virtual engine
            kv_cache = kv_cache[0]
        if isinstance(kv_cache, torch.Tensor) and kv_cache.numel() == 0:
            raise PoolNamingError(f"layer {layer_name!r} has no KV cache bound yet (vLLM's empty placeholder)")
        out.update(split_kv_cache(layer_name, kv_cache, kv_dim))
    if not out:
        raise PoolNamingError("the forward context holds no layer with a kv_cache")
    return validate_pools(out)


__all__ = [
    "PoolNamingError",
    "PoolsArg",
    "pools_from_forward_context",
    "pools_from_module",
    "pools_from_tensors",
    "resolve_pools",
    "split_kv_cache",
    "validate_pools",
]
