"""The undo log: a dispatch mode that saves the pre-image of exactly what each op call writes, and rolls it back.

Apart because it is how the eager reference leaves no trace, whatever the engine keeps: every tensor
the eager run writes (named pools, position counters such as a 0-dim ``cumulative_length``, index
tensors in dicts, module buffers) is put back, not only the pools the case names. Before each call
that writes (a ``Tensor(a!)`` argument: in-place ATen ops, ``out=`` arguments, opaque ops), the
elements it will write (its :class:`~.footprint.Footprint`) are copied; :meth:`UndoLog.rollback`
writes them back in reverse order. Tensors created during the run are skipped (nothing to put back).
Extra memory: the written elements, once per write.

Opaque ops (outside ATen's trusted namespaces) run with the log still on inside their kernel, so the
ATen writes a Python kernel makes (vLLM's side-effect KV update, a ``custom_op`` writing a pool it
takes from a context) are logged too. An opaque op's declared writes follow its registered footprint
(:func:`~.footprint.register_write_footprint`); a ``torch.library.custom_op`` is seen through its
Python kernel; any other is saved whole and named in :attr:`UndoLog.saved_whole`.

Randomness: the outputs of random ops (``nondeterministic_seeded``, less a call that applies no dropout:
SDPA's CPU kernel is tagged for its ``dropout_p``, and with ``dropout_p=0`` draws nothing) and of ops that
read them are tainted; a write whose inputs are tainted is marked ``random``, and a pool it lands in taints what
later reads it (an over-approximation: the eager reference compares such elements by whether they
were written, never by value). A write whose index or mask (an integer or bool input) is tainted is
marked ``random_positions``: where it lands is random too.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from compile_checks.check.writes.footprint import Footprint, aten_footprints, op_footprints, written_tensors
from compile_checks.check.writes.ops import is_opaque, op_name

# ATen writes whose result does not depend on the written tensor's previous values: the destination's
# own taint does not make the written values random
_OVERWRITES = frozenset(
    {"copy_", "index_copy_", "index_fill_", "fill_", "zero_", "masked_fill_", "masked_scatter_", "index_put_"}
)


def storage_key(t: torch.Tensor) -> int:
    """One key per storage (its C++ object), the same for every view of it."""
    return int(t.untyped_storage()._cdata)


def _flat(args: Any, kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
    """The tensors of an op call's arguments (schemas nest at most one list deep)."""
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out += [x for x in a if isinstance(x, torch.Tensor)]
    return out


@functools.cache
def _op_base(name: str) -> str:
    return name.removeprefix("aten::").partition(".")[0]


@dataclass
class LoggedWrite:
    """One op call's write into a tensor that existed before the run: its footprint and pre-image."""

    op: str
    footprint: Footprint
    saved: torch.Tensor
    random: bool
    storage: int  # storage_key of the written tensor
    # where it writes depends on the RNG: an index (an integer or bool input) computed from a random op
    # (``argsort(rand)`` slots); the compiled run, drawing Inductor's own numbers, writes other positions
    random_positions: bool = False


class UndoLog(TorchDispatchMode):
    """Log the pre-image of every write into pre-existing tensors; :meth:`rollback` undoes them."""

    # higher-order ops (rare in an eager run) run as they are: what they call is seen if it dispatches
    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[LoggedWrite] = []
        self.saved_whole: dict[str, int] = {}  # opaque op -> bytes saved whole (no footprint registered)
        self._created: set[int] = set()  # storages made during the run: nothing to put back
        self._tainted: set[int] = set()  # storages holding values that depend on the RNG
        self._outer: list[str] = []  # opaque ops whose kernel is running: writes are named after the outermost

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not isinstance(func, torch._ops.OpOverload):
            return func(*args, **kwargs)
        keys = {storage_key(t): t for t in _flat(args, kwargs)}  # the inputs' storages
        name = op_name(func)
        opaque = is_opaque(func)
        footprints = self._footprints(func, name, opaque, args, kwargs)
        random = _draws_random(func, args, kwargs)
        positions = False
        if self._tainted:
            written = {storage_key(f.tensor) for f in footprints}
            read = set(keys)
            if footprints and _op_base(name) in _OVERWRITES and not kwargs.get("accumulate", False):
                read -= written
            random = random or not self._tainted.isdisjoint(read)
            # an index or mask read from a random op's result: the positions themselves are random
            positions = any(
                k in self._tainted and k not in written and not (t.is_floating_point() or t.is_complex())
                for k, t in keys.items()
            )
        for fp in footprints:
            key = storage_key(fp.tensor)
            if key not in self._created and fp.tensor.numel() > 0:
                op = self._outer[0] if self._outer else name
                self.writes.append(LoggedWrite(op, fp, fp.save(), random, key, positions))
            if random:
                self._tainted.add(key)
        out = self._call(func, name, opaque, args, kwargs)
        outs = [out] if isinstance(out, torch.Tensor) else _flat(out if isinstance(out, (list, tuple)) else (), {})
        for t in outs:
            key = storage_key(t)
            if key not in keys or name == "aten::lift_fresh":  # lift_fresh returns a tensor made outside dispatch
                self._created.add(key)
            if random:
                self._tainted.add(key)
        return out

    def _footprints(
        self, func: Any, name: str, opaque: bool, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> list[Footprint]:
        if not opaque:
            return aten_footprints(func, args, kwargs)
        registered = op_footprints(func, name, args, kwargs)
        if registered is not None:
            return registered
        if _python_kernel(name):  # its ATen writes are logged from inside its kernel
            return []
        whole = [Footprint.whole(t) for t in written_tensors(func, args, kwargs)]
        fresh = [f for f in whole if storage_key(f.tensor) not in self._created]
        if fresh:
            nbytes = sum(f.tensor.numel() * f.tensor.element_size() for f in fresh)
            self.saved_whole[name] = self.saved_whole.get(name, 0) + nbytes
        return whole

    def _call(self, func: Any, name: str, opaque: bool, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        if not opaque:
            return func(*args, **kwargs)
        tensors = _flat(args, kwargs)
        if not tensors:
            return func(*args, **kwargs)  # no tensor argument: run below the mode, unlogged inside
        keys = torch._C._dispatch_keys(tensors[0])
        for t in tensors[1:]:
            keys = keys | torch._C._dispatch_keys(t)
        keys = keys & torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)
        # the kernel below the Python key, with this mode on again: what the kernel dispatches is logged
        self._outer.append(name)
        try:
            with self:
                return func.redispatch(keys, *args, **kwargs)
        finally:
            self._outer.pop()

    def rollback(self) -> list[str]:
        """Put every logged pre-image back, last write first; why any could not be (a tensor resized since)."""
        failed = []
        for w in reversed(self.writes):
            try:
                w.footprint.restore(w.saved)
            except RuntimeError as e:
                failed.append(f"{w.op}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        return failed

    @property
    def saved_bytes(self) -> int:
        """Bytes of pre-images held."""
        return sum(w.saved.numel() * w.saved.element_size() for w in self.writes)


def _draws_random(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether an op call draws from the RNG: tagged ``nondeterministic_seeded``, unless the tag is for a
    dropout the call does not apply (``dropout_p=0`` of the attention kernels, ``native_dropout`` with ``p=0``
    or ``train=False``). Without this, SDPA (``_scaled_dot_product_flash_attention_for_cpu`` is tagged) taints
    every value after the first attention, and the eager reference compares them by whether they were
    written, never by value: a write the compiled run dropped where it had written before went unseen."""
    if torch.Tag.nondeterministic_seeded not in func.tags:
        return False
    bound: dict[str, Any] = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            bound[a.name] = args[i]
        elif a.name in kwargs:
            bound[a.name] = kwargs[a.name]
        elif a.has_default_value():
            bound[a.name] = a.default_value
    if isinstance(bound.get("dropout_p"), (int, float)):
        return bound["dropout_p"] != 0
    if _op_base(op_name(func)) == "native_dropout":
        return bound.get("train") is not False and bound.get("p") != 0
    return True


def _python_kernel(name: str) -> bool:
    """A ``torch.library.custom_op``: its kernel is Python, so the ATen writes it makes reach the log."""
    from torch._library.custom_ops import OPDEFS

    return name.partition(".")[0] in OPDEFS


__all__ = ["LoggedWrite", "UndoLog", "storage_key"]
