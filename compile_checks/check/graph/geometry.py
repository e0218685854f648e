"""Where a tensor lives inside its storage: graph-side geometry (possibly symbolic) and runtime refs.

A graph compiled with ``dynamic=True`` has symbolic sizes (``s0 * 16``): its fake tensors
only carry the *first* compile's values as hints. A :class:`TensorGeometry` keeps the
hint values (so the analysis can reason about layouts) and, when any part is symbolic,
the sympy expressions too; :meth:`TensorGeometry.resolve` evaluates them for one call
from the symbol values that call's runtime inputs bind (:func:`symbol_binders`). Bytes
and offsets reported for a call therefore come from that call, never from the first compile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx

from compile_checks.check.storage_identity import storage_key
from compile_checks.errors import CompileChecksError

Exprs = tuple[tuple[Any, ...], tuple[Any, ...], Any]  # (shape, stride, storage_offset) as sympy/int


class UnresolvedSizeError(CompileChecksError, ValueError):
    """A symbolic size whose symbols no runtime input binds (e.g. an unbacked ``u0``)."""


@dataclass(frozen=True)
class TensorGeometry:
    """Where a tensor lives inside its storage, in elements (hint values when symbolic).

    ``exprs`` holds the sympy ``(shape, stride, storage_offset)`` when any of them is
    symbolic (else None); it does not take part in equality.
    """

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    dtype: torch.dtype
    exprs: Exprs | None = field(default=None, compare=False, repr=False)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def is_symbolic(self) -> bool:
        """Sizes, strides or offset are SymPy expressions (a ``dynamic=True`` graph): resolve per call."""
        return self.exprs is not None

    def element_span(self) -> tuple[int, int]:
        """Half-open element range ``[lo, hi)`` of the storage the view can touch."""
        if self.numel == 0:
            return (self.storage_offset, self.storage_offset)
        hi = self.storage_offset + sum((s - 1) * st for s, st in zip(self.shape, self.stride)) + 1
        return (self.storage_offset, hi)

    def resolve(self, bindings: Mapping[sympy.Symbol, int]) -> TensorGeometry:
        """The concrete geometry for one call (``self`` when nothing is symbolic)."""
        if self.exprs is None:
            return self
        shape, stride, offset = self.exprs
        return TensorGeometry(
            shape=tuple(_evaluate(x, bindings) for x in shape),
            stride=tuple(_evaluate(x, bindings) for x in stride),
            storage_offset=_evaluate(offset, bindings),
            dtype=self.dtype,
        )


def _evaluate(x: Any, bindings: Mapping[sympy.Symbol, int]) -> int:
    if isinstance(x, int):
        return x
    value = x.xreplace(bindings) if bindings else x
    if getattr(value, "free_symbols", None):
        # refusal: an unbound symbol (unbacked, or bound by no graph input) has no runtime value
        raise UnresolvedSizeError(f"size {x} depends on symbols no input binds: {sorted(map(str, value.free_symbols))}")
    return int(value)


def _hint_and_expr(x: object) -> tuple[int, Any]:
    """(hint, sympy expr or int) of a size; never adds a guard."""
    if isinstance(x, torch.SymInt):
        node = x.node
        expr = node.expr
        if isinstance(expr, sympy.Integer):
            return int(expr), int(expr)
        hint = node.hint
        if hint is None:
            raise ValueError(f"symbolic size {x} has no hint")
        return int(hint), expr
    return int(x), int(x)  # type: ignore[call-overload]


def make_geometry(
    shape: Sequence[object], stride: Sequence[object], offset: object, dtype: torch.dtype
) -> TensorGeometry:
    """A geometry from (possibly symbolic) sizes: hints as values, expressions kept when symbolic."""
    hs, es = zip(*(_hint_and_expr(s) for s in shape)) if len(shape) else ((), ())
    ht, et = zip(*(_hint_and_expr(s) for s in stride)) if len(stride) else ((), ())
    ho, eo = _hint_and_expr(offset)
    symbolic = any(not isinstance(e, int) for e in (*es, *et, eo))
    return TensorGeometry(tuple(hs), tuple(ht), ho, dtype, exprs=(tuple(es), tuple(et), eo) if symbolic else None)


def geometry_of(value: object) -> TensorGeometry | None:
    """Geometry of a node's ``meta["val"]`` (a fake tensor), None if not a tensor."""
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return make_geometry(value.shape, value.stride(), value.storage_offset(), value.dtype)
    except (ValueError, RuntimeError):
        return None


@dataclass(frozen=True)
class SymbolBinder:
    """Where a call's input gives a symbol its value: ``kind`` "int", "size", "stride" or "offset"."""

    symbol: sympy.Symbol
    placeholder_index: int
    kind: str
    dim: int = 0


def symbol_binders(graph: torch.fx.Graph) -> list[SymbolBinder]:
    """Every plain symbol a placeholder's value (int input, or a tensor's size/stride/offset) defines."""
    out: list[SymbolBinder] = []
    seen: set[sympy.Symbol] = set()

    def add(x: object, index: int, kind: str, dim: int = 0) -> None:
        if isinstance(x, torch.SymInt) and isinstance(x.node.expr, sympy.Symbol) and x.node.expr not in seen:
            seen.add(x.node.expr)
            out.append(SymbolBinder(x.node.expr, index, kind, dim))

    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            for d, s in enumerate(val.shape):
                add(s, i, "size", d)
            for d, s in enumerate(val.stride()):
                add(s, i, "stride", d)
            add(val.storage_offset(), i, "offset")
        else:
            add(val, i, "int")
    return out


def bind_symbols(binders: Sequence[SymbolBinder], args: Sequence[object]) -> dict[sympy.Symbol, int]:
    """Symbol -> value for one call's runtime inputs (placeholder order)."""
    out: dict[sympy.Symbol, int] = {}
    for b in binders:
        if b.placeholder_index >= len(args):
            continue
        a = args[b.placeholder_index]
        if b.kind == "int":
            if isinstance(a, (int, torch.SymInt)):
                out[b.symbol] = int(a)
        elif isinstance(a, torch.Tensor):
            if b.kind == "size":
                out[b.symbol] = int(a.shape[b.dim])
            elif b.kind == "stride":
                out[b.symbol] = int(a.stride()[b.dim])
            else:
                out[b.symbol] = int(a.storage_offset())
    return out


@dataclass(frozen=True)
class StorageRef:
    """A runtime tensor's storage identity and geometry (elements), for pool matching.

    ``data_ptr`` is :func:`~compile_checks.check.storage_identity.storage_key`: the data pointer of a
    tensor with memory, the storage's own identity for a meta or fake one (whose pointers are all 0).
    """

    data_ptr: int
    storage_offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @staticmethod
    def of(t: torch.Tensor) -> StorageRef:
        return StorageRef(
            data_ptr=storage_key(t),
            storage_offset=int(t.storage_offset()),
            shape=tuple(t.shape),
            stride=tuple(t.stride()),
            dtype=t.dtype,
        )

    @property
    def geometry(self) -> TensorGeometry:
        return TensorGeometry(self.shape, self.stride, self.storage_offset, self.dtype)

    def byte_span(self) -> tuple[int, int]:
        """Half-open byte range ``[lo, hi)`` of the storage this view can touch."""
        lo, hi = self.geometry.element_span()
        size = self.dtype.itemsize
        return lo * size, hi * size


__all__ = [
    "StorageRef",
    "SymbolBinder",
    "TensorGeometry",
    "UnresolvedSizeError",
    "bind_symbols",
    "geometry_of",
    "make_geometry",
    "symbol_binders",
]
