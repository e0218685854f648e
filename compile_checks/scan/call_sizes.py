"""A symbolic graph's byte counts at the sizes it was really called with.

A graph compiled with symbolic sizes (``dynamic=True``, or the recompile after a size changed) logs its
copies' bytes as expressions (``512*s0``). The process that ran it knows each call's sizes: the tensors'
shapes and the ints handed to the compiled callable (:mod:`compile_checks.scan.warm_run` records them).
Binding each symbol the post-grad graph's inputs carry as a bare size (``f32[s0, 2, 64]``, ``Sym(s0)``)
to the call's value gives the bytes of that call. Nothing is guessed: a symbol no input carries bare, or
inputs that do not line up with the call's arguments (another count), leave the expression unevaluated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from compile_checks.scan.fx_text import GraphTextError, parse_graph

# one call's arguments: a tensor's shape (list of ints), an int, or None (anything else)
CallSizes = Sequence[Any]


def call_sizes(args: Sequence[Any]) -> list[Any]:
    """What :func:`bind_symbols` needs of one call's arguments (plain JSON data)."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append([int(s) for s in a.shape])
        elif isinstance(a, (int, torch.SymInt)) and not isinstance(a, bool):
            out.append(int(a))
        else:
            out.append(None)
    return out


def _bind(expr: Any, value: Any, binding: dict[str, int]) -> bool:
    """Bind ``expr`` (a bare symbol) to ``value``; False on a contradiction."""
    return (
        not (isinstance(expr, sympy.Symbol) and isinstance(value, int)) or binding.setdefault(str(expr), value) == value
    )


def bind_symbols(post_grad: str, calls: Sequence[CallSizes]) -> list[dict[str, int]]:
    """Per call, ``{symbol: value}`` read off the post-grad graph's inputs and that call's arguments.

    A call whose arguments do not line up with the graph's inputs (count, rank) or contradict a binding
    gives no binding (it is left out)."""
    try:
        graph = parse_graph(post_grad).graph
    except GraphTextError:
        return []
    vals = [n.meta.get("val") for n in graph.nodes if n.op == "placeholder"]
    out: list[dict[str, int]] = []
    for call in calls:
        if len(call) != len(vals):
            continue
        binding: dict[str, int] = {}
        ok = True
        for val, arg in zip(vals, call, strict=True):
            if isinstance(val, torch.SymInt):
                ok = _bind(val.node.expr, arg, binding)
            elif isinstance(val, torch.Tensor) and isinstance(arg, list) and len(arg) == val.dim():
                for size, real in zip(val.shape, arg, strict=True):
                    if isinstance(size, torch.SymInt):
                        ok = ok and _bind(size.node.expr, real, binding)
            if not ok:
                break
        if ok and binding:
            out.append(binding)
    return out


def evaluate(expr: str, binding: dict[str, int]) -> int | None:
    """``expr`` (``512*s0``) at ``binding``; None when a symbol is left unbound."""
    try:
        value = sympy.sympify(expr, locals={name: sympy.Symbol(name) for name in binding}).subs(binding)
    except (sympy.SympifyError, TypeError, ValueError):
        return None
    return int(value) if value.is_Integer else None


def nbytes_per_call(expr: str, bindings: Sequence[dict[str, int]]) -> list[int]:
    """The distinct values of ``expr`` over the calls (in first-seen order); empty when none evaluates."""
    values = [evaluate(expr, b) for b in bindings]
    return list(dict.fromkeys(v for v in values if v is not None))


__all__ = ["bind_symbols", "call_sizes", "evaluate", "nbytes_per_call"]
