"""The private Inductor functions the check hooks, verified before use; one session at a time.

The backend wraps private Inductor functions (``post_grad_passes``, the reinplace pass,
``compile_fx_inner``). A torch release that renames one or changes its signature would
otherwise make the hook silently never fire and the check report clean: at first use
:func:`verify_inductor_hooks` checks each one and raises :class:`IncompatibleTorchError`
naming the torch version and the function.

The patches are process-global (module attributes), so two overlapping sessions would
see each other's graphs and restore each other's patches out of order:
:func:`session_lock` refuses the second one with :class:`CheckSessionError`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from compile_checks.errors import CompileChecksError


class IncompatibleTorchError(CompileChecksError, RuntimeError):
    """An Inductor function the check hooks is missing or has another signature in this torch."""


class CheckSessionError(CompileChecksError, RuntimeError):
    """A second check session was started while one is active (in this or another thread)."""


@dataclass(frozen=True)
class HookSpec:
    """One hooked (or called) private function and the leading parameters the backend relies on."""

    module: str
    name: str
    params: tuple[str, ...]
    # parameters that must exist anywhere in the signature (keyword use)
    keywords: tuple[str, ...] = ()

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


INDUCTOR_HOOKS: tuple[HookSpec, ...] = (
    # wrapped: the final post-grad graph is read when it returns
    HookSpec("torch._inductor.compile_fx", "post_grad_passes", ("gm", "is_inference")),
    # wrapped: the reinplace decision is read right after it
    HookSpec("torch._inductor.fx_passes.post_grad", "reinplace_inplaceable_ops", ("fake_tensor_updater", "graph")),
    # called with inner_compile=: every inner graph goes through the probe
    HookSpec("torch._inductor.compile_fx", "compile_fx", ("model_", "example_inputs_"), ("inner_compile",)),
    HookSpec("torch._inductor.compile_fx", "compile_fx_inner", ("gm", "example_inputs")),
    # analysis-only mode hands back an OutputCode that runs the post-grad FX graph
    HookSpec("torch._inductor.output_code", "MockFXGraphCacheOutput", ("gm",)),
    # wrapped: after it, each lowered buffer's origins settle a full compile's copies by identity
    HookSpec("torch._inductor.graph", "GraphLowering.codegen", ("self",)),
    # wrapped (freezing=True): which parameters and buffers became constants (compile_checks.check.frozen_pools)
    HookSpec("torch._inductor.freezing", "replace_params_with_constants", ("gm", "flat_params", "fw_metadata")),
)

_verified: str | None = None
_verify_lock = threading.Lock()


def _check(spec: HookSpec) -> None:
    where = f"torch {torch.__version__}: {spec.qualname}"
    try:
        module = importlib.import_module(spec.module)
    except ImportError as e:
        raise IncompatibleTorchError(f"{where}: module cannot be imported ({e}); the clone check cannot hook it") from e
    fn: Any = module
    for part in spec.name.split("."):  # a method: Class.name
        fn = getattr(fn, part, None)
    if fn is None:
        raise IncompatibleTorchError(f"{where} does not exist; the clone check hooks it and cannot run on this torch")
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError) as e:
        raise IncompatibleTorchError(f"{where}: signature cannot be read ({e})") from e
    if tuple(params[: len(spec.params)]) != spec.params or any(k not in params for k in spec.keywords):
        expected = ", ".join((*spec.params, *(f"{k}=" for k in spec.keywords)))
        raise IncompatibleTorchError(
            f"{where} has parameters ({', '.join(params)}), the clone check expects ({expected}, ...); "
            "this torch version is not supported"
        )


def verify_inductor_hooks() -> None:
    """Raise IncompatibleTorchError unless every hooked Inductor function exists as expected (cached)."""
    global _verified
    with _verify_lock:
        if _verified == torch.__version__:
            return
        for spec in INDUCTOR_HOOKS:
            _check(spec)
        _verified = torch.__version__


_session_lock = threading.Lock()
_active: str | None = None


@contextlib.contextmanager
def session_lock(label: str = "CloneCheck") -> Iterator[None]:
    """Hold the process-wide check lock; a second session while one is active is refused."""
    global _active
    if not _session_lock.acquire(blocking=False):
        raise CheckSessionError(
            f"another clone-check session is active ({_active}); the check patches Inductor "
            "process-wide, so sessions cannot overlap or nest: run them one after the other"
        )
    _active = f"{label} in thread {threading.current_thread().name!r}"
    try:
        yield
    finally:
        _active = None
        _session_lock.release()


__all__ = [
    "INDUCTOR_HOOKS",
    "CheckSessionError",
    "HookSpec",
    "IncompatibleTorchError",
    "session_lock",
    "verify_inductor_hooks",
]
