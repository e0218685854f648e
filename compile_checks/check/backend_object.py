"""The check's dynamo backend as one object per probe, the same object after ``copy`` and ``pickle``.

Engines and libraries copy the backend they are given before they compile with it:
transformers' ``CompileConfig.to_dict()`` deep-copies its fields, ``backend`` included, on every
``generate()``. A bound method deep-copies its ``self``, so a copied ``probe.compile_region``
records into a copy of the probe that no report reads ("no compiled region"). A
:class:`ProbeBackend` is returned as itself by ``copy.copy`` / ``copy.deepcopy``, and pickles as
a reference to itself (in the process that made it, while it lives): whatever copies it, every
region it compiles reaches the probe.
"""

from __future__ import annotations

import os
import pickle
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch


class RegionCompiler(Protocol):
    """What the backend compiles through (:class:`compile_checks.check.backend.Probe` has it)."""

    def compile_region(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        *,
        mode: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Callable[..., Any]: ...


# backends pickled in this process, by id: what unpickling (in this process) resolves to
_PICKLED: weakref.WeakValueDictionary[int, ProbeBackend] = weakref.WeakValueDictionary()


class ProbeBackend:
    """A dynamo backend that compiles every graph through ``probe`` (:meth:`Probe.compile_region`)."""

    __slots__ = ("__weakref__", "probe")
    # what torch.compile names a callable backend by (its _TorchCompileWrapper reads __name__)
    __name__ = "compile_checks_backend"

    def __init__(self, probe: RegionCompiler) -> None:
        self.probe = probe

    def __call__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        *,
        mode: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Callable[..., Any]:
        """``mode`` / ``options``: what ``torch.compile(fn, backend=<this>, mode=..., options=...)`` hands a backend."""
        return self.probe.compile_region(gm, example_inputs, mode=mode, options=options)

    def __copy__(self) -> ProbeBackend:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ProbeBackend:
        return self  # a copy would record into a probe no report reads

    def __reduce__(self) -> tuple[Callable[[int, int], ProbeBackend], tuple[int, int]]:
        _PICKLED[id(self)] = self
        return _pickled_backend, (os.getpid(), id(self))

    def __repr__(self) -> str:
        return f"<compile_checks backend of probe {id(self.probe):#x}>"


def _pickled_backend(pid: int, key: int) -> ProbeBackend:
    """The backend a pickle refers to: only in the process (and the check session) that pickled it."""
    backend = _PICKLED.get(key) if pid == os.getpid() else None
    if backend is None:
        raise pickle.UnpicklingError(
            "the compile_checks backend can only be unpickled in the process that pickled it, while its check "
            "session lives: it records into that session's probe"
        )
    return backend


__all__ = ["ProbeBackend", "RegionCompiler"]
