"""An instrumented Inductor backend: sees every compiled region's graphs and real inputs.

``torch.compile(fn, backend=probe.backend)`` goes through ``compile_fx`` as usual;
for the duration of :func:`instrumented_inductor` two Inductor passes and its code generation are wrapped
(and restored afterwards, whatever happens):

* ``post_grad.reinplace_inplaceable_ops``: read just after (``auto_functionalized*`` nodes then
  carry ``meta["only_clone_these_tensors"]``).
* ``compile_fx.post_grad_passes``: the graph is snapshotted when it starts (which nodes were
  traced: a clone not among them was added by a pass, the decomposition's or the user's) and
  the final post-grad graph (what Inductor lowers) is read after it returns: its copy sites
  and its blind spots.
* ``GraphLowering.codegen``: read after it (which buffers the generated code gives memory: settles
  the copies, :mod:`compile_checks.check.settle`).

The compiled callable of each inner graph is wrapped to attribute every call's real
inputs to the named pools (:mod:`compile_checks.check.runtime_pools`), and the region callable
is wrapped to count calls. What the probe could not see (a region whose post-grad graph
never reached the hook, a backward graph, a mutating op inside a higher-order-op
subgraph) is recorded as ``unanalysed``, never skipped. The hooked functions are verified
first (:mod:`compile_checks.check.hooks`) and only one session runs at a time.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
import torch._inductor.config as inductor_config
import torch._inductor.metrics as inductor_metrics
from torch._inductor import compile_fx as compile_fx_module
from torch._inductor.fx_passes import post_grad as post_grad_module
from torch._inductor.graph import GraphLowering

from compile_checks.check.analysis_cache import AnalysisCache
from compile_checks.check.backend_object import ProbeBackend
from compile_checks.check.graph.functionalized import FunctionalizedArg, functionalized_calls
from compile_checks.check.graph.generated_buffers import (
    LoweredBuffer,
    lowered_buffers,
    settle_by_identity,
    settle_inductors_choices,
    undecided_note,
)
from compile_checks.check.graph.geometry import StorageRef, SymbolBinder, TensorGeometry
from compile_checks.check.graph.input_offsets import rebase_input_offsets
from compile_checks.check.graph.sites import CloneSite
from compile_checks.check.hooks import session_lock, verify_inductor_hooks
from compile_checks.check.kernel_metrics import kernel_byte_metrics
from compile_checks.check.pool_identity import PoolIdentityWatch
from compile_checks.check.recompiles import current_frame
from compile_checks.check.reinplace_counters import missed_bytes, missed_since
from compile_checks.check.runtime_pools import CallRecorder, PoolIndex
from compile_checks.check.settle import current_cache_dir, graph_copy, needs_code, probe_cpu_isa
from compile_checks.vocab import PHASES, BlindSpot, Phase


@dataclass
class InnerGraph:
    """One ``compile_fx_inner`` call (the forward graph of an inference region, or a backward)."""

    functionalized: list[FunctionalizedArg] = field(default_factory=list)
    clone_sites: list[CloneSite] = field(default_factory=list)
    post_grad_code: str = ""
    binders: list[SymbolBinder] = field(default_factory=list)
    # compile-time geometry of each graph input: Inductor's offsets are relative to it
    inputs: list[TensorGeometry | None] = field(default_factory=list)
    post_grad_seen: bool = False
    # Inductor's own no-op rule (compile_fx_inner: no call node, nothing to lower): a graph of placeholders
    # and an output (the region returns its inputs, e.g. `x.type_as(v)` of equal dtypes) has nothing to copy
    nothing_to_lower: bool = False
    is_backward: bool = False
    # what the analysis cannot see into (higher-order-op subgraphs, no callable), each (kind, detail)
    blind_spots: list[tuple[BlindSpot, str]] = field(default_factory=list)
    # write-backs whose copy was taken from other bytes than it is written into (a miscompile)
    misplaced: list[str] = field(default_factory=list)
    # caveats for the report (whole-buffer passes that are no copy)
    notes: list[str] = field(default_factory=list)
    recorder: CallRecorder | None = None
    calls: int = 0
    # Inductor's generated code (a full compile's CompiledFxGraph.source_code; empty in analysis-only mode)
    generated_code: str = ""
    # each buffer Inductor lowered (name -> the post-grad nodes it came from, its bytes): settles copies by identity
    lowered: dict[str, LoweredBuffer] | None = None
    # analysis-only: a site is Inductor's choice, so Inductor generates this graph's code to settle it
    # (compile_checks.check.settle); the post-grad graph still runs
    settling: bool = False
    settle_gm: torch.fx.GraphModule | None = field(default=None, repr=False)  # what runs once the code is read
    # why a site of Inductor's choice stayed unsettled (no generated code), for its note
    unsettled: str = ""
    # the op producing each output of the post-grad graph (names what made a pool a region replaced)
    output_ops: list[str] = field(default_factory=list)
    # bytes PyTorch's own ReinplaceCounters counted as missed in this graph's reinplace pass (None: unread)
    reinplace_missed_bytes: int | None = None


@dataclass
class Region:
    """One dynamo graph handed to the backend (one compiled region), in compile order."""

    index: int
    compiled_fn_name: str
    inner: list[InnerGraph] = field(default_factory=list)
    calls: int = 0
    kernel_bytes: int = 0
    compile_seconds: float = 0.0
    # seconds per phase (PHASES); dynamo is measured from the frame's compile start
    phase_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    # the code dynamo compiled this region from and its compile id (compile_checks.check.recompiles)
    code: str = ""
    compile_id: str = ""
    # the dynamo graph's code (a dump's captured graph when depyf wrote none)
    captured_code: str = ""
    # where the caller's value of each graph input came from (dynamo's source, ``kv_cache['full_cache']``; None
    # where dynamo recorded none): names a copy of an input no pool names
    input_sources: list[str | None] = field(default_factory=list)
    # torch._guards.TraceId (compile id, attempt) it was compiled under: its findings are logged there
    # (compile_checks.check.trace_artifacts)
    trace_id: Any = None


def input_sources(gm: torch.fx.GraphModule) -> list[str | None]:
    """The caller's expression of each placeholder of a dynamo graph: its source without dynamo's frame
    prefix (``L['kv_cache']['full_cache']`` -> ``kv_cache['full_cache']``); None where it has none."""
    out: list[str | None] = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        source = getattr(node.meta.get("grapharg"), "source", None)
        name = getattr(source, "name", None)
        name = name() if callable(name) else name  # a method before torch 2.14
        if isinstance(name, str) and name:
            name = re.sub(r"^[LG]\['([^']+)'\]", r"\1", name)
        out.append(name if isinstance(name, str) and name else None)
    return out


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
    # True: stop each compile after the post-grad passes and run the post-grad FX graph itself (no kernel
    # is built: the verdict is the same, kernel bytes are 0); a graph holding a site of Inductor's buffer
    # choice first has Inductor generate its code, which settles it (compile_checks.check.settle)
    analysis_only: bool = False
    pools: PoolIndex = field(default_factory=lambda: PoolIndex(None))
    # named pools some compiled graph received on some call
    received_pools: set[str] = field(default_factory=set)
    # compile_checks.check.writes.regions.RegionWriteWatch: watches each compiled graph's runs for undeclared writes
    write_watch: Any = None
    # compile_checks.check.writes.calls.CallWriteCheck: each region call against its captured graph run eagerly
    call_writes: Any = None
    _current_inner: InnerGraph | None = None
    _current_gm: torch.fx.GraphModule | None = None
    _preexisting: set[torch.fx.Node] = field(default_factory=set)
    _frame_start: float | None = None
    _last_backend_end: float = 0.0
    _post_grad_seconds: float = 0.0
    _post_grad_started: float | None = None  # when the current inner compile first entered the post-grad passes

    # a zero-argument callable returning the (validated) pools: re-read before every region call, so
    # an engine that rebuilds its cache tensors is followed (Case(pools=callable))
    pools_provider: Callable[[], Mapping[str, torch.Tensor] | None] | None = None
    pool_tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    # named pools a region call returned as another tensor (an out-of-place update rebound): pool_replaced
    identity: PoolIdentityWatch = field(default_factory=PoolIdentityWatch)
    # named pools an engine's opaque op reached by name while its compiled model ran, not as a graph input
    # (vLLM's cache ops look each layer's kv_cache up in the forward context): never copied by Inductor
    reached_by_name: Collection[str] = field(default_factory=set)
    # compiles dynamo restarted (RestartAnalysis raised through the backend): never counted as regions
    restarts: list[str] = field(default_factory=list)
    # compiles that raised (the region never runs): why, for the report's notes
    compile_failures: list[str] = field(default_factory=list)
    # each distinct post-grad graph's analysis, reused for the graphs equal to it (identical blocks)
    analyses: AnalysisCache = field(default_factory=AnalysisCache)
    _cache_dir: str = ""  # Inductor's cache folder outside the current compile's fresh one

    def set_pools(self, pools: Mapping[str, torch.Tensor] | None) -> None:
        self.pools = PoolIndex(pools)
        self.pool_tensors = dict(pools or {})

    def refresh_pools(self) -> None:
        """Re-read the pools from ``pools_provider`` (in place: every recorder holds this index)."""
        if self.pools_provider is None:
            return
        pools = dict(self.pools_provider() or {})
        if pools.keys() == self.pool_tensors.keys() and all(pools[n] is self.pool_tensors[n] for n in pools):
            return
        self.identity.compare(self.pool_tensors, pools)
        self.pools.reset(pools)
        self.pool_tensors = pools
        if self.write_watch is not None:
            self.write_watch.pools = dict(pools)

    # ---- the pass wrappers -------------------------------------------------------------
    def wrap_reinplace(self, original: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(original)
        def reinplace(fake_tensor_updater: Any, graph: torch.fx.Graph) -> None:
            before = missed_bytes()
            original(fake_tensor_updater, graph)
            if self._current_inner is not None:
                self._current_inner.functionalized = functionalized_calls(graph)
                self._current_inner.reinplace_missed_bytes = missed_since(before)

        return reinplace

    def wrap_post_grad(self, original: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(original)
        def post_grad_passes(gm: torch.fx.GraphModule, is_inference: bool) -> None:
            # the graph as traced (dynamo + AOT): a clone in it is the program's own; one added by
            # any post-grad pass (Inductor's, or the user's post_grad_custom_pre/post_pass, as
            # vLLM's pass manager installs) is not, whatever pass added it
            if gm is self._current_gm:
                self._preexisting = set(gm.graph.nodes)
            t0 = time.perf_counter()
            if self._post_grad_started is None:
                self._post_grad_started = t0
            original(gm, is_inference)
            self._post_grad_seconds += time.perf_counter() - t0
            inner = self._current_inner
            # subgraphs run first (_recursive_post_grad_passes); the top graph is last
            if inner is not None and gm is self._current_gm:
                found = self.analyses.analysed(gm, self._preexisting)  # once per distinct graph (analysis_cache)
                inner.clone_sites, inner.misplaced = list(found.clone_sites), list(found.misplaced)
                inner.notes, inner.output_ops = list(found.notes), list(found.output_ops)
                inner.post_grad_code = gm.code
                inner.binders, inner.inputs = list(found.binders), list(found.inputs)
                inner.blind_spots = list(found.blind_spots)
                inner.post_grad_seen = True
                if self.analysis_only and needs_code(inner.clone_sites):
                    # only Inductor's code settles these sites: lower on, to its code (wrap_codegen stops there)
                    inner.settling, inner.settle_gm = True, graph_copy(gm)
                    probe_cpu_isa(self._cache_dir)  # outside this compile's fresh cache folder
                elif self.analysis_only:
                    raise _StopAfterPostGrad(gm)

        return post_grad_passes

    def wrap_codegen(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``GraphLowering.codegen``: after it, every buffer's origins (what a full compile's copies are settled by)."""

        @functools.wraps(original)
        def codegen(graph_lowering: Any) -> Any:
            out = original(graph_lowering)
            inner = self._current_inner
            if inner is not None:
                inner.lowered = {**(inner.lowered or {}), **lowered_buffers(graph_lowering)}
                if inner.settle_gm is not None:
                    raise _StopAfterPostGrad(inner.settle_gm)  # the code has spoken: no kernel is built
            return out

        return codegen

    # ---- the backend ---------------------------------------------------------------------
    @functools.cached_property
    def backend(self) -> ProbeBackend:
        """The dynamo backend (one object per probe): what ``torch.compile(backend=...)`` gets."""
        return ProbeBackend(self)

    def _inner_compile(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *args: Any, region: Region, **kwargs: Any
    ) -> Any:
        inner = InnerGraph(is_backward=bool(kwargs.get("is_backward", False)))
        inner.nothing_to_lower = not has_calls(gm.graph)
        region.inner.append(inner)
        saved = (self._current_inner, self._current_gm, self._post_grad_seconds, self._post_grad_started)
        self._current_inner, self._current_gm, self._post_grad_seconds, self._post_grad_started = inner, gm, 0.0, None
        self._cache_dir = current_cache_dir()
        t0 = time.perf_counter()
        try:
            out = compile_fx_module.compile_fx_inner(gm, example_inputs, *args, **kwargs)
        except _StopAfterPostGrad as stop:
            out = _run_fx_graph(stop.gm)
        except Exception as failed:
            if inner.settle_gm is None or inner.lowered is not None:
                raise
            # Inductor could not generate the code that settles it: the post-grad graph runs, the site is undecided
            why = (str(failed).strip().splitlines() or [""])[0][:200]
            inner.unsettled = f"Inductor's code generation raised {type(failed).__name__}: {why}"
            out = _run_fx_graph(inner.settle_gm)
        finally:
            elapsed, post_grad = time.perf_counter() - t0, self._post_grad_seconds
            prep = elapsed if self._post_grad_started is None else self._post_grad_started - t0
            region.phase_seconds[Phase.INDUCTOR_PREP] += prep
            region.phase_seconds[Phase.POST_GRAD] += post_grad
            after = Phase.FX_RUNNER if self.analysis_only and not inner.settling else Phase.CODEGEN
            region.phase_seconds[after] += max(0.0, elapsed - prep - post_grad)
            self._current_inner, self._current_gm, self._post_grad_seconds, self._post_grad_started = saved
            inner.settle_gm = None
        inner.generated_code = str(getattr(out, "source_code", "") or "")
        self._settle(inner)
        inner.recorder = CallRecorder(
            self.pools, inner.clone_sites, inner.functionalized, inner.binders, self.received_pools, inner.inputs
        )
        if inner.nothing_to_lower and not inner.post_grad_seen:
            # Inductor returned the graph's own forward (no post-grad passes, no code): nothing to attribute
            return out
        _record_inputs(out, inner)
        if self.write_watch is not None:
            self.write_watch.on_compiled(out, gm, region.index)
        return out

    def _settle(self, inner: InnerGraph) -> None:
        """Settle the graph's copies from Inductor's generated code (a full compile's, or the one analysis-only
        generated for a site of Inductor's choice); a site of Inductor's choice no code settled is undecided."""
        if inner.lowered is not None:  # Inductor's own records of its code: every site settled by identity
            inner.clone_sites, settled = settle_by_identity(inner.clone_sites, inner.lowered)
            inner.notes += settled
        elif inner.generated_code:  # code without those records: its text settles Inductor's choices
            inner.clone_sites, settled = settle_inductors_choices(inner.clone_sites, inner.generated_code)
            inner.notes += settled
        why = inner.unsettled or (
            "its generated code could not be read for it" if inner.generated_code else "Inductor generated no code"
        )
        inner.notes += [undecided_note(c, why) for c in inner.clone_sites if c.buffer_is_inductors_choice]

    def compile_region(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        *,
        mode: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Callable[..., Any]:
        """What the backend does with one dynamo graph: ``compile_fx`` with the instrumented inner compile.

        ``mode`` / ``options`` are what ``torch.compile(fn, backend=<this>, mode=..., options=...)``
        hands a backend: applied as Inductor config patches, as the ``inductor`` backend would.
        """
        from depyf.explain.utils import get_current_compiled_fn_name

        t0 = time.perf_counter()
        region = Region(index=len(self.regions), compiled_fn_name=get_current_compiled_fn_name())
        self.regions.append(region)
        region.code, region.compile_id = current_frame()
        region.captured_code = gm.code
        region.input_sources = input_sources(gm)
        region.trace_id = torch._guards.CompileContext.current_trace_id()
        if self._frame_start is not None:
            region.phase_seconds[Phase.DYNAMO] = t0 - max(self._frame_start, self._last_backend_end)
        inductor_metrics.reset()
        eager = None if self.call_writes is None else self.call_writes.eager_copy(gm)  # before passes rewrite gm
        inner_compile = functools.partial(self._inner_compile, region=region)
        patches = {**(torch._inductor.list_mode_options(mode) if mode else {}), **dict(options or {})}
        try:
            compiled = compile_fx_module.compile_fx(
                gm, example_inputs, inner_compile=inner_compile, config_patches=patches
            )
        except torch._dynamo.exc.RestartAnalysis as restart:
            self._restarted(region, restart)
            raise
        except Exception as failed:  # the region stays (never run: unanalysed); the note says why
            why = (str(failed).strip().splitlines() or [""])[0][:200]
            self.compile_failures.append(
                f"region {region.index} ({region.compiled_fn_name}): its compile raised {type(failed).__name__}: "
                f"{why}; where dynamo went on, the frame ran without this region, unchecked"
            )
            raise
        end = time.perf_counter()
        region.compile_seconds = end - t0
        inner = sum(v for k, v in region.phase_seconds.items() if k not in (Phase.DYNAMO, Phase.AOT))
        region.phase_seconds[Phase.AOT] = max(0.0, region.compile_seconds - inner)
        self._last_backend_end = end
        region.kernel_bytes = int(inductor_metrics.num_bytes_accessed)
        after = functools.partial(self._region_returned, region)
        if eager is not None:
            compiled = self.call_writes.wrap(region.index, eager, compiled)
        return _count_calls(compiled, region, self.refresh_pools, after)  # type: ignore[arg-type]  # a callable here

    def _restarted(self, region: Region, restart: BaseException) -> None:
        """Dynamo restarts its analysis of the frame (``RestartAnalysis``: under ``dynamic=True`` AOT's
        ``TensorifyScalarRestartAnalysis`` when a float input cannot stay a tensor): this attempt is no region.

        Dynamo discards what the backend returned so far and traces the frame again; the next attempt
        calls the backend anew and is the region that runs. The aborted one is dropped (its time counts
        as the next region's dynamo phase) and named in :attr:`restarts`, with the pieces of the same
        attempt already compiled (a split graph, as the vllm-piecewise simulation compiles it: one
        compile id): the last regions, so the indices stay in compile order.
        """
        attempt = [r for r in self.regions if r is region or (region.compile_id and r.compile_id == region.compile_id)]
        self.regions = [r for r in self.regions if all(r is not a for a in attempt)]
        self.restarts.append(
            f"{region.compiled_fn_name} ({region.code or 'unknown code'}): dynamo restarted the analysis "
            f"({type(restart).__name__}); the attempt is not a region, its next compile is"
        )

    def _region_returned(self, region: Region, out: Any) -> None:
        """After each region call: what it returned, for the next pools re-read to compare against."""
        if self.pools_provider is None:
            return  # pools never re-read: nothing to compare
        ops = region.inner[-1].output_ops if region.inner else []
        count = len(out) if isinstance(out, (list, tuple)) else 1
        self.identity.region_returned(region.index, out, ops if len(ops) == count else ())

    def frame_started(self, _args: object = None) -> None:
        """Dynamo's compile-start callback: the dynamo phase of the next region starts here."""
        self._frame_start = time.perf_counter()


def has_calls(graph: torch.fx.Graph) -> bool:
    """Whether ``compile_fx_inner`` lowers ``graph`` (its rule: ``torch._dynamo.utils.count_calls(graph) == 0``
    returns the graph's own forward, never running the post-grad passes)."""
    from torch._dynamo.utils import count_calls

    return count_calls(graph) > 0


def _run_fx_graph(gm: torch.fx.GraphModule) -> Any:
    """An OutputCode that runs the post-grad FX graph (aten ops + the custom op) eagerly.

    Explicit offsets into graph inputs are first rebased to what Inductor's code uses
    (:mod:`compile_checks.check.graph.input_offsets`): run as traced, a region reused for
    another layer's view of one storage wrote the compile-time layer's bytes.
    """
    from torch._inductor.output_code import MockFXGraphCacheOutput

    runnable, _ = rebase_input_offsets(gm)

    def call(args: list[Any]) -> Any:
        return runnable(*args)

    out = MockFXGraphCacheOutput(gm=None)
    out.current_callable = call  # type: ignore[attr-defined]
    out.gm = lambda args: out.current_callable(args)  # type: ignore[attr-defined]  # noqa: PLW0108 - late-bound: current_callable is replaced after this
    return out


def _count_calls(
    compiled: Callable[..., Any], region: Region, before: Callable[[], None], after: Callable[[Any], None]
) -> Callable[..., Any]:
    """Wrap a region callable to count its runs (``before`` each one, ``after`` with what it returned),
    keeping its calling convention."""

    @functools.wraps(compiled)
    def run(*args: Any, **kwargs: Any) -> Any:
        region.calls += 1
        before()
        out = compiled(*args, **kwargs)
        after(out)
        return out

    if getattr(compiled, "_boxed_call", False):
        run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _record_inputs(out: Any, inner: InnerGraph) -> None:
    """Attribute the real inputs of an Inductor-compiled graph on each call (placeholder order)."""
    current = getattr(out, "current_callable", None)
    if current is None:
        # refusal: no callable to wrap means no runtime inputs, so no attribution
        inner.blind_spots.append((BlindSpot.NO_CALLABLE, ""))
        return
    recorder = inner.recorder
    assert recorder is not None

    def call(args: list[Any]) -> Any:
        inner.calls += 1
        recorder.observe(args)
        return current(args)

    out.current_callable = call


@contextlib.contextmanager
def instrumented_inductor(
    probe: Probe, functionalization: str = "v2", extra_config: dict[str, Any] | None = None
) -> Iterator[Probe]:
    """Patch Inductor for one check; everything is restored (and dynamo reset) on exit.

    ``functionalization="v1"`` sets ``enable_auto_functionalized_v2=False`` as vLLM does.
    Caches are disabled: the FX graph cache would hand back code compiled for another
    layout without running the passes this check observes. Raises IncompatibleTorchError
    when a hooked function is missing, CheckSessionError when a session is already active.
    """
    if functionalization not in ("v1", "v2"):
        raise ValueError(f"functionalization must be 'v1' or 'v2', got {functionalization!r}")
    verify_inductor_hooks()
    patches = {
        **(extra_config or {}),
        "force_disable_caches": True,
        "enable_auto_functionalized_v2": functionalization == "v2",
    }
    from torch._dynamo.callback import callback_handler

    with session_lock():
        torch._dynamo.reset()
        callback_handler.register_start_callback(probe.frame_started)
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
                mock.patch.object(GraphLowering, "codegen", probe.wrap_codegen(GraphLowering.codegen)),
            ):
                # caches are off on purpose; dynamo says so once per process otherwise
                warnings.filterwarnings("ignore", message=".*dynamo_pgo force disabled.*")
                yield probe
        finally:
            callback_handler.remove_start_callback(probe.frame_started)
            torch._dynamo.reset()


__all__ = [
    "PHASES",
    "InnerGraph",
    "Probe",
    "Region",
    "StorageRef",
    "has_calls",
    "instrumented_inductor",
    "kernel_byte_metrics",
]
