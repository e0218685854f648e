"""What a case built without values (``meta`` / ``FakeTensorMode``) cannot do, said in one line with the user's line.

Two ways such a case fails deep inside torch, each turned into a :class:`~compile_checks.errors.UsageError`
that names the user's line and what to do:

* **the program reads a value** (``.item()``, ``int(t)``, ``nonzero``, boolean masks: an output size or a
  host value that depends on the tensor's contents): on fake tensors torch raises
  ``DataDependentOutputException`` / ``DynamicOutputShapeException`` naming an ATen op. :func:`needs_values_error`
  finds it in the exception's chain and names the innermost line of the user's code it came from.
* **a meta tensor held as a module global** (``POOL = torch.zeros(..., device="meta")`` read by the model):
  the check converts the meta tensors the case holds (model, pools, inputs, closures) into FakeTensors, never
  a module's globals, so the global stays on ``meta`` beside the converted ones and the compile fails
  (``auto_functionalized_v2 was not removed``, a device mismatch). :func:`meta_globals_error` finds such a
  global among the names the case's functions read, before anything compiles.
"""

from __future__ import annotations

import dis
import re
import traceback
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, is_fake

from compile_checks.errors import UsageError

# what each value-reading op is, in the user's words
_READS = {
    "aten._local_scalar_dense.default": "reads a tensor's value on the host (`.item()`, `int(t)`, `if t:`)",
    "aten.nonzero.default": "makes a tensor whose size depends on values (`nonzero`, a boolean mask)",
}
_VALUE_ERRORS = (DataDependentOutputException, DynamicOutputShapeException)
_USER_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
# frames of these folders are never the user's line
_NOT_USERS = tuple(
    str(Path(p).resolve())
    for p in (Path(torch.__file__).parent, Path(__file__).parent, Path(traceback.__file__).parent)
)


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        cur = todo.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        todo += [getattr(cur, "inner_exception", None), cur.__cause__, cur.__context__]


def _is_users(filename: str) -> bool:
    path = str(Path(filename).resolve()) if not filename.startswith("<") else filename
    return not filename.startswith("<") and not path.startswith(_NOT_USERS) and "site-packages" not in path


def user_line(e: BaseException) -> str | None:
    """``file.py:LINE: source`` of the innermost frame of the user's code in ``e``'s chain (its tracebacks, and
    the frames dynamo names under "from user code"); None when no frame is the user's."""
    best: tuple[str, int, str] | None = None
    for exc in _chain(e):
        for frame in traceback.extract_tb(exc.__traceback__):
            if _is_users(frame.filename) and frame.lineno is not None:
                best = (frame.filename, frame.lineno, (frame.line or "").strip())
        text = str(exc)
        if best is None and "from user code:" in text:
            frames = _USER_FRAME.findall(text.split("from user code:", 1)[1])
            if frames:
                best = (frames[-1][0], int(frames[-1][1]), "")
    if best is None:
        return None
    filename, lineno, source = best
    return f"{Path(filename).name}:{lineno}" + (f": `{source}`" if source else "")


def needs_values_error(e: BaseException, built: str) -> UsageError | None:
    """A one-line UsageError when ``e`` is torch refusing to read a fake tensor's value; else None.
    ``built``: how the case's tensors were built (``on meta``, ``under FakeTensorMode``)."""
    found = next((x for x in _chain(e) if isinstance(x, _VALUE_ERRORS)), None)
    if found is None:
        return None
    op = str(getattr(found, "func", "") or (str(found).split(":")[0] if str(found) else type(found).__name__))
    what = _READS.get(op, f"needs a tensor's values ({op})")
    where = user_line(e)
    return UsageError(
        f"this case needs values: {where or 'its code'} {what}, and its tensors were built {built} (no values); "
        "build this case on real tensors (at a size that fits), or keep the value on the host (a Python int) "
        "instead of reading it from a tensor"
    )


# ---- meta tensors held as module globals --------------------------------------------------------------


def _codes(fn: Any) -> Iterator[tuple[types.CodeType, dict[str, Any]]]:
    """(code, its globals) of ``fn``: a function, a bound method, a module's ``forward`` and its submodules'."""
    if isinstance(fn, torch.nn.Module):
        for module in fn.modules():
            forward = type(module).forward
            if isinstance(forward, types.FunctionType) and forward.__module__ != torch.nn.Module.__module__:
                yield from _codes(forward)
        return
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if isinstance(fn, types.FunctionType) and not fn.__module__.startswith("torch"):
        yield fn.__code__, fn.__globals__
        for cell in fn.__closure__ or ():
            try:
                inner = cell.cell_contents
            except ValueError:
                continue
            if isinstance(inner, (types.FunctionType, types.MethodType)):
                yield from _codes(inner)


def _nested(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _nested(const)


def _holds_meta(value: Any, depth: int = 3) -> bool:
    """A meta tensor (not a FakeTensor) in ``value``: itself, a list / tuple / dict of them, an object's attributes."""
    if isinstance(value, torch.Tensor):
        return bool(value.is_meta and not is_fake(value))
    if depth <= 0 or isinstance(value, (str, bytes, int, float, type, types.ModuleType, types.FunctionType)):
        return False
    if isinstance(value, dict):
        return any(_holds_meta(v, depth - 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_meta(v, depth - 1) for v in value)
    if isinstance(value, torch.nn.Module):
        return False  # a module global is walked as a model would be: through the case, not here
    return hasattr(value, "__dict__") and any(_holds_meta(v, depth - 1) for v in vars(value).values())


def meta_globals_error(parts: Iterable[Any]) -> UsageError | None:
    """A one-line UsageError naming the first module global holding a meta tensor that the functions of
    ``parts`` (the case's ``fn``, ``compile``, ``driver``) read; None when there is none."""
    for part in parts:
        for top, scope in _codes(part):
            for code in _nested(top):
                for ins in dis.get_instructions(code):
                    if ins.opname != "LOAD_GLOBAL" or ins.argval not in scope:
                        continue
                    if not _holds_meta(scope[ins.argval]):
                        continue
                    line = ins.positions.lineno if ins.positions is not None else None
                    where = f"{Path(code.co_filename).name}:{line or code.co_firstlineno}"
                    return UsageError(
                        f"a meta tensor is held as a module global: `{ins.argval}`, read at {where} "
                        f"(in {code.co_name}); the check compiles the meta tensors the case holds (model, pools, "
                        "inputs, closures) as FakeTensors, never a module's globals: hold it in the model or the "
                        "cache object the case reaches, or pass it as an argument"
                    )
    return None


__all__ = ["meta_globals_error", "needs_values_error", "user_line"]
