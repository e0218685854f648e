"""The "vllm" pipeline: compile as vLLM 0.33 does on a CPU host.

On CPU, vLLM never runs ``VllmBackend``: ``CpuPlatform.check_and_update_config`` turns
``CompilationMode.VLLM_COMPILE`` into ``DYNAMO_TRACE_ONCE`` with ``backend="inductor"``,
i.e. plain ``torch.compile(forward, backend="inductor", options=inductor_compile_config)``
with ``enable_auto_functionalized_v2=False`` (v1 functionalization) from
``CompilationConfig.__post_init__``. This module reads those settings from a real
``VllmConfig`` (:func:`vllm_settings`) and compiles:

* a plain callable with the check's instrumented backend under those settings;
* a module decorated with vLLM's ``@support_torch_compile`` through vLLM's own
  ``TorchCompileWithNoGuardsWrapper``: its config names :func:`check_backend` by qualname
  (vLLM resolves it with ``resolve_obj_by_qualname``), and that resolver forwards to the
  active check's backend. The one change from vLLM's own config is that backend string.

vLLM is imported only when a vllm pipeline is used (``import vllm.config`` costs seconds),
always inside :func:`~compile_checks.pipelines.vllm_env.vllm_env`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from compile_checks.pipelines.vllm_env import VllmPipelineError, vllm_env, vllm_module
from compile_checks.session import CloneCheck, CompileCheckError, callable_name, first_line

if TYPE_CHECKING:
    from vllm.config import VllmConfig

CHECK_BACKEND_QUALNAME = "compile_checks.pipelines.vllm.check_backend"

# the backends of the checks now compiling through vLLM (innermost last)
_ACTIVE_BACKENDS: list[Callable[..., Any]] = []


def check_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
    """The dynamo backend vLLM's wrapper resolves by qualname: the active check's backend."""
    if not _ACTIVE_BACKENDS:
        raise VllmPipelineError(
            f"{CHECK_BACKEND_QUALNAME} was called outside compile_for_pipeline(check, module, 'vllm'): "
            "no clone check is active to compile this graph"
        )
    return _ACTIVE_BACKENDS[-1](gm, example_inputs, **kwargs)


@contextlib.contextmanager
def active_backend(backend: Callable[..., Any]) -> Iterator[None]:
    """Make :func:`check_backend` forward to ``backend`` for the duration."""
    _ACTIVE_BACKENDS.append(backend)
    try:
        yield
    finally:
        _ACTIVE_BACKENDS.remove(backend)


def make_vllm_config(
    *, splitting_ops: Sequence[str] | None = None, backend: str | None = CHECK_BACKEND_QUALNAME, **compilation: Any
) -> VllmConfig:
    """A ``VllmConfig`` as vLLM builds it on this CPU host (``VLLM_COMPILE`` requested, then
    ``CpuPlatform.check_and_update_config``), with ``backend`` set to the check's resolver.

    ``backend=None`` keeps vLLM's own ("inductor"); ``compilation`` is passed to
    ``CompilationConfig`` (e.g. ``inductor_compile_config={...}``); ``splitting_ops`` is
    kept for the "vllm-piecewise" simulation (vLLM's CPU path does not split).
    """
    cfg = vllm_module("vllm.config")
    with vllm_env():
        compilation_config = cfg.CompilationConfig(mode=cfg.CompilationMode.VLLM_COMPILE, **compilation)
        config = cfg.VllmConfig(compilation_config=compilation_config)
    if backend is not None:
        config.compilation_config.backend = backend
    if splitting_ops is not None:
        config.compilation_config.splitting_ops = list(splitting_ops)
    return config


@contextlib.contextmanager
def vllm_compile_context(
    check: CloneCheck | None = None, vllm_config: VllmConfig | None = None
) -> Iterator[VllmConfig]:
    """Build (or use) a vLLM config and make it current; with ``check``, route
    :func:`check_backend` to it.

    Construct ``@support_torch_compile`` modules inside it: vLLM's wrapper resolves its
    backend from the current config when the module is built.
    """
    config = vllm_config if vllm_config is not None else make_vllm_config()
    with contextlib.ExitStack() as stack:
        stack.enter_context(vllm_env())
        stack.enter_context(vllm_module("vllm.config").set_current_vllm_config(config))
        if check is not None:
            stack.enter_context(active_backend(check.probe.backend))
        yield config


# ---- settings ------------------------------------------------------------------------------------


@functools.cache
def _vllm_compilation_settings() -> tuple[str, tuple[tuple[str, Any], ...], tuple[str, ...]]:
    """(functionalization, inductor config items, notes) of vLLM's CPU compile, from vLLM itself."""
    import torch._inductor.config as inductor_config

    config = make_vllm_config(backend=None)
    compilation = config.compilation_config
    options = dict(compilation.inductor_compile_config)
    # CompilationConfig.__post_init__ sets it to False unless the user set it: v1
    functionalization = "v2" if options.pop("enable_auto_functionalized_v2", True) else "v1"
    known = inductor_config.get_config_copy()
    notes = []
    for key in sorted(options):
        if key not in known:  # a key this torch's Inductor does not have: patching it would raise
            notes.append(f"dropped vLLM inductor_compile_config[{key!r}]={options.pop(key)!r}: not an Inductor config")
    if compilation.backend != "inductor":
        notes.append(f"vLLM chose backend {compilation.backend!r} here; the check compiles with Inductor regardless")
    return functionalization, tuple(sorted(options.items())), tuple(notes)


def vllm_settings() -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """(functionalization, Inductor config, notes) vLLM compiles with on this host."""
    functionalization, items, notes = _vllm_compilation_settings()
    return functionalization, dict(items), notes


def clear_settings_cache() -> None:
    """Forget the settings read from vLLM (tests that change vLLM's defaults call this)."""
    _vllm_compilation_settings.cache_clear()


# ---- compiling -----------------------------------------------------------------------------------


def is_vllm_compiled_module(fn: Any) -> bool:
    """An instance of a class decorated with vLLM's ``@support_torch_compile``."""
    wrapper = vllm_module("vllm.compilation.wrapper")
    return isinstance(fn, wrapper.TorchCompileWithNoGuardsWrapper)


def compile_vllm(
    check: CloneCheck,
    fn: Callable[..., Any],
    inductor_config: Mapping[str, Any],
    *,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    mode: str | None = None,
) -> Callable[..., Any]:
    """``fn`` compiled as vLLM does on CPU, observed by ``check`` (see the module docstring)."""
    if is_vllm_compiled_module(fn):
        require_check_backend(fn, dynamic=dynamic)
        return run_under_vllm(check, fn, fn, inductor_config, fn.vllm_config, check.probe.backend)  # type: ignore[attr-defined]
    compiled = check.compile(fn, dynamic=dynamic, fullgraph=fullgraph, mode=mode)
    return run_under_vllm(check, fn, compiled, inductor_config)


def run_under_vllm(
    check: CloneCheck,
    fn: Any,
    compiled: Callable[..., Any],
    inductor_config: Mapping[str, Any],
    vllm_config: VllmConfig | None = None,
    backend: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """``compiled`` called in :func:`vllm_env` with the pipeline's Inductor config (the check's own
    patches win), ``vllm_config`` current and :func:`check_backend` routed to ``backend``.

    The first call must hand the check a region (:func:`observed_first_call`); errors from the
    compile become CompileCheckError naming ``fn``.
    """
    import torch._inductor.config as inductor_cfg

    patches = {**inductor_config, **check.inductor_config}

    @observed_first_call(check, fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with contextlib.ExitStack() as stack:
            stack.enter_context(vllm_env())
            stack.enter_context(inductor_cfg.patch(patches))
            if vllm_config is not None:
                stack.enter_context(vllm_module("vllm.config").set_current_vllm_config(vllm_config))
            if backend is not None:
                stack.enter_context(active_backend(backend))
            try:
                return compiled(*args, **kwargs)
            except (CompileCheckError, VllmPipelineError):
                raise
            except Exception as e:
                raise CompileCheckError(f"compile of {callable_name(fn)} through vLLM failed: {first_line(e)}") from e

    return run


def observed_first_call(check: CloneCheck, fn: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a pipeline's call: its first call must hand the check at least one region.

    A vLLM-wrapped module compiled elsewhere (or a backend that bypassed the check) would
    otherwise run uncompiled-by-the-check code and the report would say clean.
    """

    def decorate(call: Callable[..., Any]) -> Callable[..., Any]:
        first = [True]

        @functools.wraps(call)
        def run(*args: Any, **kwargs: Any) -> Any:
            if not first[0]:
                return call(*args, **kwargs)
            before = len(check.probe.regions)
            out = call(*args, **kwargs)
            first[0] = False
            if len(check.probe.regions) == before:
                raise CompileCheckError(
                    f"{callable_name(fn)} ran but the check observed no compiled region: it was not compiled through "
                    "the check's backend (already compiled before the check, or compiled by another backend)"
                )
            return out

        return run

    return decorate


def require_check_backend(module: Any, *, dynamic: bool | None = None) -> None:
    """vLLM's wrapper resolved its backend when the module was built: it must be the check's,
    and the module must not be compiled yet (vLLM drops guards and never recompiles)."""
    if dynamic:
        raise ValueError(
            f"dynamic: {type(module).__name__} is compiled by vLLM's wrapper, which marks dynamic dims from "
            "its @support_torch_compile(dynamic_arg_dims=...); leave Case.dynamic None (or False)"
        )
    if getattr(module, "compiled", False) or getattr(module, "aot_compiled_fn", None) is not None:
        raise ValueError(
            f"fn: {type(module).__name__} was already compiled by vLLM before the check; vLLM never recompiles "
            "it, so the check would observe nothing. Build a fresh module for each check"
        )
    CompilationMode = vllm_module("vllm.config").CompilationMode

    compilation = module.vllm_config.compilation_config
    if getattr(module, "do_not_compile", False) or compilation.mode != CompilationMode.DYNAMO_TRACE_ONCE:
        raise ValueError(
            f"fn: {type(module).__name__} was built with compilation mode {compilation.mode!r}"
            f"{' and is not compiled by vLLM' if getattr(module, 'do_not_compile', False) else ''}; build it "
            "under compile_checks.pipelines.vllm.make_vllm_config() (DYNAMO_TRACE_ONCE, as vLLM's CPU platform sets)"
        )
    if compilation.backend != CHECK_BACKEND_QUALNAME:
        raise ValueError(
            f"fn: {type(module).__name__} was built with vLLM backend {compilation.backend!r}; the check can only "
            f"observe a module built with backend {CHECK_BACKEND_QUALNAME!r} (make_vllm_config() sets it)"
        )


__all__ = [
    "CHECK_BACKEND_QUALNAME",
    "active_backend",
    "check_backend",
    "clear_settings_cache",
    "compile_vllm",
    "is_vllm_compiled_module",
    "make_vllm_config",
    "observed_first_call",
    "require_check_backend",
    "run_under_vllm",
    "vllm_compile_context",
    "vllm_settings",
]
