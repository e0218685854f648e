"""A logged graph (``GraphModule.print_readable`` text) back into an ``fx.Graph`` the live finders read.

``print_readable(include_stride=True, include_device=True)`` is Python: ``ast`` parses it. Each
statement ``name: "f32[1024, 2, 32][64, 32, 1]cpu" = torch.ops.aten.clone.default(arg1_1)`` becomes
a ``call_function`` node whose target is the real ``OpOverload`` (so op schemas say which argument
is written and which result aliases which input, as in the live graph), and whose
``meta["val"]`` is a meta tensor of the annotated dtype, sizes and strides; ``# File: ...``
comments become ``meta["stack_trace"]``. What the text does not hold is not invented: an input's
storage offset is not printed (taken as 0; an ``as_strided`` node's explicit offset is kept), and an
op this process has not registered keeps its name (:class:`UnknownOp`) and no schema.

Symbolic sizes (``s0``, ``64*s0``: a ``dynamic=True`` compile) become SymInts of one ``ShapeEnv``
with made-up distinct hints; the scan reports their bytes as expressions (:func:`symbolic_nbytes`).
"""

from __future__ import annotations

import ast
import builtins
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx
from torch.fx.experimental.sym_node import SymNode
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._dtype_abbrs import dtype_abbrs
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges

from compile_checks.scan.artifacts import ScanError

_DTYPES = {abbr: dtype for dtype, abbr in dtype_abbrs.items()}
# ``f32[1024, 2, 32][64, 32, 1]cpu`` / ``Sym(s0)``
# strides and device are printed only with include_stride / include_device (the trace's payload has
# both; Inductor's debug folder and depyf print neither: a value is then taken as contiguous)
_TENSOR_ANN = re.compile(r"^(?P<dtype>[a-z0-9]+)\[(?P<shape>[^\]]*)\](?:\[(?P<stride>[^\]]*)\])?(?P<device>.*)$")
_FILE_COMMENT = re.compile(r"^\s*# File: (?P<file>.+?):(?P<line>\d+) in (?P<func>[^,]+), code: (?P<code>.*)$")
_ROOTS: dict[str, Any] = {"torch": torch, "operator": operator, "math": math, "builtins": builtins}
_CONSTANTS: dict[str, Any] = {"inf": math.inf, "nan": math.nan, "None": None, "True": True, "False": False}
# how FX prints SymInt arithmetic (``operator.mul`` as ``a * b``)
_OPERATORS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}
_FIRST_HINT = 1009  # hints for symbols: distinct primes, so no two sizes compare equal by accident


class GraphTextError(ScanError):
    """The logged graph is not ``print_readable`` text this parser understands."""


@dataclass(frozen=True)
class UnknownOp:
    """An op this process has not registered (``torch.ops.ns.name``): no schema, so no known writes."""

    qualname: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never run
        raise RuntimeError(f"{self.qualname} is not registered in this process")

    def __str__(self) -> str:
        return self.qualname


@dataclass
class ParsedGraph:
    """The rebuilt graph, its symbols (name -> sympy symbol), and what could not be rebuilt."""

    graph: torch.fx.Graph
    symbols: dict[str, sympy.Symbol] = field(default_factory=dict)
    unknown_ops: set[str] = field(default_factory=set)
    contiguous_assumed: bool = False  # the text printed no strides (debug folder, depyf): taken as contiguous


def _resolve(expr: ast.expr) -> Any:
    """``torch.ops.aten.clone.default`` / ``operator.getitem`` / ``torch.float32`` as the object."""
    parts: list[str] = []
    cur = expr
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name) or cur.id not in _ROOTS:
        raise GraphTextError(f"cannot resolve {ast.unparse(expr)}")
    parts.append(cur.id)
    parts.reverse()
    obj = _ROOTS[parts[0]]
    for i, p in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, p)
        except (AttributeError, RuntimeError):
            if parts[:2] == ["torch", "ops"] and i >= 2:
                return UnknownOp(".".join(parts))
            raise GraphTextError(f"cannot resolve {'.'.join(parts)}") from None
    return obj


class _Builder:
    def __init__(self, source: str) -> None:
        self.lines = source.splitlines()
        self.graph = torch.fx.Graph()
        self.env: dict[str, torch.fx.Node] = {}
        self.shape_env = ShapeEnv()
        self.symbols: dict[str, sympy.Symbol] = {}
        self.unknown: set[str] = set()
        self.contiguous_assumed = False

    # ---- annotations -> meta["val"] ----
    def _size(self, text: str) -> Any:
        text = text.strip()
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        expr = sympy.sympify(text, locals=dict(self.symbols))
        for sym in expr.free_symbols:
            if str(sym) not in self.symbols:
                self.symbols[str(sym)] = sym
                # a backed size symbol: its range and a made-up hint, as Dynamo registers one
                self.shape_env.var_to_range[sym] = ValueRanges(2, int_oo)
                self.shape_env.backed_var_to_val[sym] = sympy.Integer(_FIRST_HINT + 2 * len(self.symbols))
        hint = expr.subs(self.shape_env.backed_var_to_val)
        return torch.SymInt(SymNode(expr, self.shape_env, int, hint=int(hint)))

    def value(self, annotation: str | None, offset: int = 0) -> Any:
        if not annotation:
            return None
        if annotation.startswith("Sym(") and annotation.endswith(")"):
            return self._size(annotation[4:-1])
        m = _TENSOR_ANN.match(annotation)
        if m is None or m.group("dtype") not in _DTYPES:
            return None
        shape = [self._size(s) for s in m.group("shape").split(",") if s.strip()]
        if m.group("stride") is None:
            self.contiguous_assumed = True
            stride = [1] * len(shape)
            for d in range(len(shape) - 2, -1, -1):
                stride[d] = stride[d + 1] * shape[d + 1]
        else:
            stride = [self._size(s) for s in m.group("stride").split(",") if s.strip()]
        dtype = _DTYPES[m.group("dtype")]
        if any(isinstance(x, torch.SymInt) for x in (*shape, *stride)):
            from torch._subclasses.fake_tensor import FakeTensorMode

            with FakeTensorMode(shape_env=self.shape_env, allow_non_fake_inputs=True):
                return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        span = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 0
        base = torch.empty(offset + span, dtype=dtype, device="meta")
        return base.as_strided(shape, stride, offset)

    # ---- statements -> nodes ----
    def stack_trace(self, lineno: int) -> str | None:
        """The ``# File:`` comment of the group the statement on ``lineno`` (1-based) belongs to."""
        for i in range(lineno - 2, -1, -1):
            text = self.lines[i]
            if not text.strip():
                return None
            m = _FILE_COMMENT.match(text)
            if m:
                return f'  File "{m["file"]}", line {m["line"]}, in {m["func"]}\n    {m["code"]}'
        return None

    def arg(self, expr: ast.expr) -> Any:
        if isinstance(expr, ast.Name):
            if expr.id in self.env:
                return self.env[expr.id]
            if expr.id in _CONSTANTS:
                return _CONSTANTS[expr.id]
            raise GraphTextError(f"name {expr.id!r} used before it is defined")
        if isinstance(expr, (ast.List, ast.Tuple)):
            items = [self.arg(e) for e in expr.elts]
            return items if isinstance(expr, ast.List) else tuple(items)
        if isinstance(expr, ast.Attribute):
            return _resolve(expr)
        try:
            if isinstance(expr, ast.Call) and ast.unparse(expr.func) in ("device", "torch.device"):
                kw = {k.arg: ast.literal_eval(k.value) for k in expr.keywords if k.arg is not None}
                return torch.device(*[ast.literal_eval(a) for a in expr.args], **kw)
            return ast.literal_eval(expr)
        except (ValueError, TypeError, RuntimeError):
            return ast.unparse(expr)  # kept as text: the finders read nodes and int offsets only

    def call(self, name: str, value: ast.expr, annotation: str | None, lineno: int) -> None:
        if isinstance(value, ast.Subscript):  # ``getitem = auto_functionalized[1]``
            target: Any = operator.getitem
            args: tuple[Any, ...] = (self.arg(value.value), self.arg(value.slice))
            kwargs: dict[str, Any] = {}
        elif isinstance(value, ast.Call):
            target = _resolve(value.func)
            args = tuple(self.arg(a) for a in value.args)
            kwargs = {k.arg: self.arg(k.value) for k in value.keywords if k.arg is not None}
        elif isinstance(value, (ast.BinOp, ast.UnaryOp)) and type(value.op) in _OPERATORS:  # ``mul = s0 * s1``
            target = _OPERATORS[type(value.op)]
            operands = (value.left, value.right) if isinstance(value, ast.BinOp) else (value.operand,)
            args, kwargs = tuple(self.arg(a) for a in operands), {}
        elif isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
            node = self.graph.get_attr(value.attr)
            self.env[name] = node
            return
        elif isinstance(value, ast.Name) and value.id in self.env:  # ``l_x_ = L_x_`` (a Dynamo graph)
            self.env[name] = self.env[value.id]
            return
        else:
            raise GraphTextError(f"line {lineno}: cannot read statement {name} = {ast.unparse(value)}")
        if isinstance(target, UnknownOp):
            self.unknown.add(target.qualname)
        node = self.graph.create_node("call_function", target, args, kwargs, name=name)
        offset = args[3] if target is torch.ops.aten.as_strided.default and len(args) > 3 else 0
        val = self.value(annotation, offset if isinstance(offset, int) else 0)
        if val is not None:
            node.meta["val"] = val
        trace = self.stack_trace(lineno)
        if trace:
            node.meta["stack_trace"] = trace
        self.env[name] = node

    def build(self, forward: ast.FunctionDef) -> None:
        for a in forward.args.args[1:]:  # skip self
            node = self.graph.placeholder(a.arg)
            val = self.value(_annotation(a.annotation))
            if val is not None:
                node.meta["val"] = val
            self.env[a.arg] = node
        for stmt in forward.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                self.call(stmt.target.id, stmt.value, _annotation(stmt.annotation), stmt.lineno)
            elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
                continue  # ``x = y = None``: print_readable frees dead values
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                self.call(stmt.targets[0].id, stmt.value, None, stmt.lineno)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                self.call(f"_stmt_{stmt.lineno}", stmt.value, None, stmt.lineno)
            elif isinstance(stmt, ast.Return):
                self.graph.output(self.arg(stmt.value) if stmt.value is not None else None)
            elif isinstance(stmt, ast.Pass):
                continue
            else:
                raise GraphTextError(f"line {stmt.lineno}: unexpected statement {ast.unparse(stmt)[:80]!r}")


def _annotation(expr: ast.expr | None) -> str | None:
    """The string annotation print_readable writes (``"f32[4][1]cpu"``), else None."""
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def _forward(tree: ast.Module) -> ast.FunctionDef:
    """The top-level graph's ``forward`` (nested classes are submodules: their own graphs)."""
    for top in tree.body:
        if isinstance(top, ast.ClassDef):
            for item in top.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return item
        if isinstance(top, ast.FunctionDef) and top.name == "forward":
            return top
    raise GraphTextError("no forward() in the logged graph")


def _parse(text: str) -> tuple[str, ast.Module]:
    # print_readable names a lambda-compiled module ``class <lambda>(...)``: not Python
    source = re.sub(r"^(\s*class )<(\w+)>", r"\1_\2", text, flags=re.M)
    try:
        return source, ast.parse(source)
    except SyntaxError as e:
        raise GraphTextError(f"the logged graph is not valid Python (line {e.lineno}: {e.msg})") from None


def forward_parameters(text: str) -> list[str]:
    """The graph's input names, in order (a Dynamo graph's ``L_k_pools_0_`` ...)."""
    return [a.arg for a in _forward(_parse(text)[1]).args.args[1:]]


def parse_graph(text: str) -> ParsedGraph:
    """The logged post-grad graph as an ``fx.Graph`` (node names as logged)."""
    source, tree = _parse(text)
    builder = _Builder(source)
    builder.build(_forward(tree))
    return ParsedGraph(builder.graph, builder.symbols, builder.unknown, builder.contiguous_assumed)


def symbolic_nbytes(val: Any) -> str | None:
    """``numel * itemsize`` of a tensor with symbolic sizes, as an expression (``256*s0``); None if static."""
    if not isinstance(val, torch.Tensor) or not any(isinstance(s, torch.SymInt) for s in val.shape):
        return None
    n: Any = sympy.Integer(val.dtype.itemsize)
    for s in val.shape:
        n *= s.node.expr if isinstance(s, torch.SymInt) else s
    return str(n)


__all__ = ["GraphTextError", "ParsedGraph", "UnknownOp", "forward_parameters", "parse_graph", "symbolic_nbytes"]
