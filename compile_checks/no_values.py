"""Cases built without allocating: model, pools and inputs on ``meta`` or under ``FakeTensorMode``.

A production-size engine (a 14B DiT's weights and its pools) does not fit a CI runner, and its
verdict does not need it to: copies are read from Inductor's post-grad graph, which needs shapes,
strides, dtypes and which tensors share storage, never values. Such a case is checked analysis-only:

- **FakeTensors** (built under the user's ``FakeTensorMode``): compiled and run as they are, under
  that mode (``FakeTensorMode`` is entered around the run).
- **meta**: Inductor's pattern matcher leaves meta tensors alone (``unsupported_input_tensor``), so
  ``auto_functionalized`` survives post-grad and the compile fails. :class:`MetaToFake` turns every meta
  tensor the case holds into a ``FakeTensor`` of device ``cpu`` under one ``FakeTensorMode``, in place
  where the case keeps it (module parameters and buffers, lists, dicts, object attributes, a closure's
  cells; a tuple is rebuilt in its parent): one storage stays one storage, a view stays a view of its base.
- Pools are told apart by storage identity (:mod:`compile_checks.check.storage_identity`), since
  every meta or fake storage reports address 0.
- Everything that needs values is skipped, with one note (:meth:`NoValues.note`): the write checks
  (lost and undeclared writes), a case's ``verify``, and a full compile (its generated code cannot run
  on fake tensors).
"""

from __future__ import annotations

import enum
import functools
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, is_fake, maybe_get_fake_mode
from torch._subclasses.meta_utils import MetaConverter
from torch.utils._mode_utils import no_dispatch

from compile_checks.errors import UsageError

# how deep the in-place conversion follows attributes / items / closures from what the case holds
MAX_DEPTH = 12


class Storage(enum.StrEnum):
    """Where a case's tensors keep their values."""

    META = "meta"
    FAKE = "fake"


@dataclass
class NoValues:
    """A case (or check session) whose tensors carry no values, and what was skipped for it."""

    storage: Storage
    mode: FakeTensorMode
    skipped: list[str] = field(default_factory=list)
    converted: bool = False  # meta tensors replaced by FakeTensors (:meth:`to_fake`)

    def to_fake(self, device: torch.device | str = "cpu") -> MetaToFake:
        """The converter that replaces this case's meta tensors by FakeTensors under :attr:`mode`."""
        self.converted = True
        return MetaToFake(self.mode, device)

    def skip(self, what: str) -> None:
        if what not in self.skipped:
            self.skipped.append(what)

    @property
    def built(self) -> str:
        """How the case's tensors were built, for a message: ``on meta`` / ``under FakeTensorMode``."""
        return "on meta" if self.storage == Storage.META else "under FakeTensorMode"

    def note(self) -> str:
        """The one note a report gets: why the verdict is analysis-only, and what was not checked."""
        built = "on meta (compiled as FakeTensors)" if self.storage == Storage.META else "as FakeTensors"
        skipped = ", ".join(["the write checks (lost and undeclared writes)", *self.skipped])
        return (
            f"no values: the tensors were built {built}, so the verdict is analysis-only (copies, names and "
            f"bytes from the post-grad graph); skipped as they need values: {skipped}"
        )


def _leaves(obj: Any) -> Iterator[torch.Tensor]:
    """The tensors of a pytree (args, kwargs, a pools mapping), a module's parameters and buffers."""
    if isinstance(obj, torch.nn.Module):
        yield from obj.parameters()
        yield from obj.buffers()
        return
    for leaf in torch.utils._pytree.tree_leaves(obj):
        if isinstance(leaf, torch.Tensor):
            yield leaf


def no_values(*objs: Any) -> NoValues | None:
    """``NoValues`` when the tensors of ``objs`` are meta or fake; None when they are real (or none).

    A mix of real tensors with meta or fake ones, or fake tensors of two ``FakeTensorMode`` s, is a
    :class:`~compile_checks.errors.UsageError`: the check could neither run the real ones' compiled code
    nor trace them beside fake ones.
    """
    real, meta, modes = 0, 0, dict[int, FakeTensorMode]()
    for obj in objs:
        for t in _leaves(obj):
            if is_fake(t):
                mode = maybe_get_fake_mode(t)
                if mode is not None:
                    modes[id(mode)] = mode
            elif t.is_meta:
                meta += 1
            else:
                real += 1
    if not meta and not modes:
        return None
    if real:
        raise UsageError(
            f"{real} real tensor(s) beside meta or fake ones: build the model, pools and inputs all on meta "
            "(`with torch.device('meta'):`) or all under one FakeTensorMode, or all real"
        )
    if len(modes) > 1:
        raise UsageError(f"fake tensors of {len(modes)} FakeTensorModes: build them all under one")
    mode = next(iter(modes.values())) if modes else FakeTensorMode()
    return NoValues(Storage.META if meta else Storage.FAKE, mode)


class MetaToFake:
    """Meta tensors -> FakeTensors of ``device`` under ``mode``, replaced in place where they are held.

    One converter per case: it remembers every storage and tensor it converted (``MetaConverter``'s
    memo), so tensors sharing a storage share one fake storage, and a view stays a view of its base.
    """

    def __init__(self, mode: FakeTensorMode, device: torch.device | str = "cpu") -> None:
        self.mode = mode
        self.device = torch.device(device)
        self._converter: MetaConverter[FakeTensor] = MetaConverter()
        self._done: dict[int, Any] = {}  # id(original) -> its replacement (itself when nothing changed)
        self._keep: list[Any] = []  # the originals, alive while ids are remembered
        self.converted = 0

    def _fake(self, make_meta: Any, device: torch.device | str = "meta") -> FakeTensor:
        dev = torch.device(device)
        with no_dispatch():
            return FakeTensor(self.mode, make_meta(), self.device if dev.type == "meta" else dev)

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` as a FakeTensor when it is meta (a Parameter stays a Parameter); else ``t``."""
        if not t.is_meta or is_fake(t):
            return t
        if id(t) in self._done:
            return self._done[id(t)]
        fake = self._converter(t, callback=self._fake)
        if fake is NotImplemented:
            raise UsageError(f"cannot convert a meta {type(t).__name__} {tuple(t.shape)} to a FakeTensor")
        if fake.fake_device.type == "meta":  # a view: made from its (converted) base by as_strided, kept on meta
            fake.fake_device = self.device
        self._done[id(t)], self.converted = fake, self.converted + 1
        self._keep.append(t)
        return fake

    def swap(self, obj: Any, depth: int = MAX_DEPTH) -> Any:
        """``obj`` with every meta tensor it reaches replaced (containers in place; a tuple rebuilt)."""
        if isinstance(obj, torch.Tensor):
            return self.tensor(obj)
        if depth <= 0 or _atomic(obj):
            return obj
        key = id(obj)
        if key in self._done:
            return self._done[key]
        self._done[key] = obj  # a cycle back to obj sees obj itself
        self._keep.append(obj)
        new = self._swap_container(obj, depth - 1)
        self._done[key] = new
        return new

    def _swap_container(self, obj: Any, depth: int) -> Any:
        if isinstance(obj, torch.nn.Module):
            for table in (obj._parameters, obj._buffers, obj._modules):
                self._swap_items(table, depth)
            self._swap_attrs(obj, depth, skip=("_parameters", "_buffers", "_modules"))
        elif isinstance(obj, (dict, list)):
            self._swap_items(obj, depth)
        elif isinstance(obj, tuple):
            items = [self.swap(v, depth) for v in obj]
            if any(a is not b for a, b in zip(items, obj)):
                return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
        elif isinstance(obj, types.FunctionType):
            for cell in obj.__closure__ or ():
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                new = self.swap(value, depth)
                if new is not value:
                    cell.cell_contents = new
        elif isinstance(obj, types.MethodType):
            self.swap(obj.__self__, depth)
            self.swap(obj.__func__, depth)
        elif isinstance(obj, functools.partial):
            args = tuple(self.swap(a, depth) for a in obj.args)
            self._swap_items(obj.keywords, depth)
            if any(a is not b for a, b in zip(args, obj.args)):
                obj.__setstate__((obj.func, args, obj.keywords, obj.__dict__))  # type: ignore[attr-defined]
            self.swap(obj.func, depth)
        elif hasattr(obj, "__dict__"):
            self._swap_attrs(obj, depth)
        return obj

    def _swap_items(self, table: Any, depth: int) -> None:
        pairs: Iterable[tuple[Any, Any]] = table.items() if isinstance(table, Mapping) else enumerate(table)
        for k, v in list(pairs):
            new = self.swap(v, depth)
            if new is not v:
                table[k] = new

    def _swap_attrs(self, obj: Any, depth: int, skip: tuple[str, ...] = ()) -> None:
        attrs = vars(obj)
        for k, v in list(attrs.items()):
            if k in skip or k.startswith("__"):
                continue
            new = self.swap(v, depth)
            if new is not v:
                attrs[k] = new  # through __dict__: a frozen dataclass keeps its fields too


def _atomic(obj: Any) -> bool:
    """Nothing worth walking into: scalars, strings, types, Python modules, torch's own value types."""
    return obj is None or isinstance(
        obj,
        (
            str,
            bytes,
            int,
            float,
            complex,
            bool,
            type,
            types.ModuleType,
            types.BuiltinFunctionType,
            torch.device,
            torch.dtype,
            torch.Generator,
            enum.Enum,
        ),
    )


__all__ = ["MAX_DEPTH", "MetaToFake", "NoValues", "Storage", "no_values"]
