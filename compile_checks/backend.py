"""An instrumented Inductor backend: sees every compiled region's graphs and real inputs.

``torch.compile(fn, backend=probe.backend)`` goes through ``compile_fx`` as usual;
for the duration of :func:`instrumented_inductor` two Inductor passes are wrapped
(and restored afterwards):

* ``post_grad.reinplace_inplaceable_ops``: the graph is snapshotted just before
  (which nodes exist: a later clone not among them came from the decomposition)
  and read just after (``auto_functionalized*`` nodes then carry
  ``meta["only_clone_these_tensors"]``).
* ``compile_fx.post_grad_passes``: the final post-grad graph (what Inductor
  lowers) is read after it returns.

The compiled callable of each inner graph is wrapped to record the real tensors
it receives (placeholder order, so a clone's placeholder maps to a caller's pool
by storage), and the region callable is wrapped to count calls.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
import torch._inductor.config as inductor_config
import torch._inductor.metrics as inductor_metrics
from torch._inductor import compile_fx as compile_fx_module
from torch._inductor.fx_passes import post_grad as post_grad_module

from compile_checks.graph_analysis import (
    CloneSite,
    FunctionalizedArg,
    find_clone_sites,
    functionalized_calls,
)


@dataclass(frozen=True)
class StorageRef:
    """A runtime tensor's storage identity and geometry (elements), for pool matching."""

    data_ptr: int
    storage_offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @staticmethod
    def of(t: torch.Tensor) -> StorageRef:
        return StorageRef(
            data_ptr=t.untyped_storage().data_ptr(),
            storage_offset=t.storage_offset(),
            shape=tuple(t.shape),
            stride=tuple(t.stride()),
            dtype=t.dtype,
        )


@dataclass
class InnerGraph:
    """One ``compile_fx_inner`` call (the forward graph of an inference region)."""

    functionalized: list[FunctionalizedArg] = field(default_factory=list)
    clone_sites: list[CloneSite] = field(default_factory=list)
    post_grad_code: str = ""
    # distinct tuples of runtime inputs (None for non-tensors), placeholder order
    input_signatures: list[tuple[StorageRef | None, ...]] = field(default_factory=list)
    calls: int = 0


@dataclass
class Region:
    """One dynamo graph handed to the backend (one compiled region), in compile order."""

    index: int
    compiled_fn_name: str
    inner: list[InnerGraph] = field(default_factory=list)
    calls: int = 0
    kernel_bytes: int = 0
    compile_seconds: float = 0.0


_MAX_SIGNATURES = 256


class _StopAfterPostGrad(BaseException):
    """Raised (analysis-only mode) once the final post-grad graph is recorded, to skip codegen.

    A BaseException so compile_fx_inner's ``except Exception`` wrappers let it through.
    """

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__("analysis only: stop after post-grad passes")
        self.gm = gm


@dataclass
class Probe:
    """Collects :class:`Region` records while compiling; see :func:`instrumented_inductor`."""

    regions: list[Region] = field(default_factory=list)
    # True: stop each compile after the post-grad passes and run the post-grad FX graph itself
    # (no Inductor lowering / C++ codegen: the verdict is the same, kernel bytes are 0)
    analysis_only: bool = False
    _current_inner: InnerGraph | None = None
    _current_gm: torch.fx.GraphModule | None = None
    _preexisting: set[torch.fx.Node] = field(default_factory=set)

    # ---- the pass wrappers -------------------------------------------------------------
    def wrap_reinplace(self, original: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(original)
        def reinplace(fake_tensor_updater: Any, graph: torch.fx.Graph) -> None:
            self._preexisting = set(graph.nodes)
            original(fake_tensor_updater, graph)
            if self._current_inner is not None:
                self._current_inner.functionalized = functionalized_calls(graph)

        return reinplace

    def wrap_post_grad(self, original: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(original)
        def post_grad_passes(gm: torch.fx.GraphModule, is_inference: bool) -> None:
            self._preexisting = set()
            original(gm, is_inference)
            inner = self._current_inner
            if inner is not None and gm.graph is not None:
                # subgraphs run first (_recursive_post_grad_passes); the top graph is last
                inner.clone_sites = find_clone_sites(gm.graph, self._preexisting)
                inner.post_grad_code = gm.code
                if self.analysis_only and gm is self._current_gm:
                    raise _StopAfterPostGrad(gm)

        return post_grad_passes

    # ---- the backend ---------------------------------------------------------------------
    def _inner_compile(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        inner = InnerGraph()
        self.regions[-1].inner.append(inner)
        self._current_inner = inner
        self._current_gm = gm
        try:
            out = compile_fx_module.compile_fx_inner(gm, example_inputs, **kwargs)
        except _StopAfterPostGrad as stop:
            out = _run_fx_graph(stop.gm)
        finally:
            self._current_inner = None
            self._current_gm = None
        _record_inputs(out, inner)
        return out

    def backend(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        """A dynamo backend: ``compile_fx`` with the instrumented inner compile."""
        from depyf.explain.utils import get_current_compiled_fn_name

        region = Region(index=len(self.regions), compiled_fn_name=get_current_compiled_fn_name())
        self.regions.append(region)
        inductor_metrics.reset()
        t0 = time.perf_counter()
        compiled = compile_fx_module.compile_fx(gm, example_inputs, inner_compile=self._inner_compile)
        region.compile_seconds = time.perf_counter() - t0
        region.kernel_bytes = int(inductor_metrics.num_bytes_accessed)
        return _count_calls(compiled, region)


def _run_fx_graph(gm: torch.fx.GraphModule) -> Any:
    """An OutputCode that runs the post-grad FX graph (aten ops + the custom op) eagerly."""
    from torch._inductor.output_code import MockFXGraphCacheOutput

    def call(args: list[Any]) -> Any:
        return gm(*args)

    out = MockFXGraphCacheOutput(gm=None)
    out.current_callable = call  # type: ignore[attr-defined]
    out.gm = lambda args: out.current_callable(args)  # type: ignore[attr-defined]
    return out


def _count_calls(compiled: Callable[..., Any], region: Region) -> Callable[..., Any]:
    """Wrap a region callable to count its runs, keeping its calling convention."""

    @functools.wraps(compiled)
    def run(*args: Any, **kwargs: Any) -> Any:
        region.calls += 1
        return compiled(*args, **kwargs)

    if getattr(compiled, "_boxed_call", False):
        run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _record_inputs(out: Any, inner: InnerGraph) -> None:
    """Record the real inputs of an Inductor-compiled graph on each call (placeholder order)."""
    current = getattr(out, "current_callable", None)
    if current is None:
        return

    def call(args: list[Any]) -> Any:
        inner.calls += 1
        if len(inner.input_signatures) < _MAX_SIGNATURES:
            sig = tuple(StorageRef.of(a) if isinstance(a, torch.Tensor) else None for a in args)
            if sig not in inner.input_signatures:
                inner.input_signatures.append(sig)
        return current(args)

    out.current_callable = call


@contextlib.contextmanager
def kernel_byte_metrics() -> Iterator[None]:
    """Make compile_fx count kernel bytes (``torch._inductor.metrics.num_bytes_accessed``; it
    does so only while its ``inductor_metrics`` log is at INFO), without printing that log."""
    log = compile_fx_module.inductor_metrics_log
    saved = (log.level, log.propagate, list(log.handlers), log.disabled)
    log.setLevel(logging.INFO)
    log.propagate = False
    log.disabled = False
    log.handlers = [logging.NullHandler()]
    try:
        yield
    finally:
        log.setLevel(saved[0])
        log.propagate = saved[1]
        log.handlers = saved[2]
        log.disabled = saved[3]


@contextlib.contextmanager
def instrumented_inductor(
    probe: Probe, functionalization: str = "v2", extra_config: dict[str, Any] | None = None
) -> Iterator[Probe]:
    """Patch Inductor for one check; everything is restored (and dynamo reset) on exit.

    ``functionalization="v1"`` sets ``enable_auto_functionalized_v2=False`` as vLLM does.
    Caches are disabled: the FX graph cache would hand back code compiled for another
    layout without running the passes this check observes.
    """
    if functionalization not in ("v1", "v2"):
        raise ValueError(f"functionalization must be 'v1' or 'v2', got {functionalization!r}")
    patches = {
        **(extra_config or {}),
        "force_disable_caches": True,
        "enable_auto_functionalized_v2": functionalization == "v2",
    }
    torch._dynamo.reset()
    try:
        with (
            warnings.catch_warnings(),
            inductor_config.patch(patches),
            kernel_byte_metrics(),
            mock.patch.object(
                post_grad_module,
                "reinplace_inplaceable_ops",
                probe.wrap_reinplace(post_grad_module.reinplace_inplaceable_ops),
            ),
            mock.patch.object(
                compile_fx_module,
                "post_grad_passes",
                probe.wrap_post_grad(compile_fx_module.post_grad_passes),
            ),
        ):
            # caches are off on purpose; dynamo says so once per process otherwise
            warnings.filterwarnings("ignore", message=".*dynamo_pgo force disabled.*")
            yield probe
    finally:
        torch._dynamo.reset()
