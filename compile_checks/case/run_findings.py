"""What a case's run found beyond copies: lost writes against an eager reference, and recompiles.

Apart from :mod:`.run` because this is the eager side of the run: the reference is taken (state
snapshotted, run eagerly, restored) before the compiled run and compared after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from unittest import mock

if TYPE_CHECKING:  # the checker imports torch: loading a case file must stay cheap
    from compile_checks.case.definition import Case
    from compile_checks.check.findings import CloneReport


def write_reference(case: Case) -> Any:
    """The eager reference for the lost-write check (compile_checks.check.writes.lost), or None when it is off.

    The eager run is what the compiled run runs: with ``Case.compile`` the same hook, its ``torch.compile``
    calls handing back what they were given (no dynamo wrapper outlives the eager run) and dynamo's
    ``force_eager`` stance on for any other path; the driver gets the same kind of object.
    ``Case.reset`` is called first (and again before the compiled run, by :func:`run_case`).
    """
    if not case.check_writes or (case.driver is None and case.verify is None):
        return None
    # lazy: the write check and the pool resolver import torch; loading a case file stays torch-free
    import torch

    from compile_checks.check.writes.lost import eager_reference
    from compile_checks.pools import resolve_pools

    if case.reset is not None:
        case.reset()
    pools = resolve_pools(case.pools) or {}  # a pools callable is read here, before the eager run
    if not pools:
        return None

    fn, context = _eager(case)

    def run() -> Any:
        with (
            context(),
            case.grad_mode(),
            torch.compiler.set_stance("force_eager"),
            mock.patch.object(torch, "compile", _no_compile),
        ):
            target: Any = fn
            if case.compile is not None:
                target = case.compile(_never_called) or fn
            return case.driver(target) if case.driver is not None else target(*case.args, **dict(case.kwargs))

    try:
        return eager_reference(pools, run)
    except Exception as e:  # the state is restored; the case fails with the reason
        return (
            f"the eager reference run of the lost-write check failed ({type(e).__name__}: {e}); "
            "Case(check_writes=False) skips it for a case that cannot run eagerly or twice"
        )


def _no_compile(model: Any = None, **_: Any) -> Any:
    """``torch.compile`` while the eager reference runs ``Case.compile``: what it was given, unwrapped, so the
    hook installs no dynamo wrapper that would outlive the eager run (``force_eager`` covers any other path)."""
    return model if model is not None else (lambda fn: fn)


def _never_called(gm: Any, example_inputs: Any) -> Any:
    """The backend the eager run hands ``Case.compile``: under ``force_eager`` dynamo never calls it."""
    return gm.forward


def _eager(case: Case) -> tuple[Callable[..., Any], Callable[[], contextlib.AbstractContextManager[Any]]]:
    """``case.fn`` as eager code and the context it runs in (vLLM's env and config on its pipelines).

    A ``@support_torch_compile`` module's ``forward`` is its eager code (calling the module compiles it).
    """
    if str(case.pipeline) == "stock":
        return case.fn, contextlib.nullcontext
    # lazy: the vLLM pipeline modules import torch (and the checker); a stock case never loads them
    from compile_checks.pipelines.vllm import is_vllm_compiled_module
    from compile_checks.pipelines.vllm_env import vllm_env, vllm_module

    config = getattr(case.fn, "vllm_config", None)

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        with vllm_env():
            if config is None:
                yield
                return
            with vllm_module("vllm.config").set_current_vllm_config(config):
                yield

    fn: Callable[..., Any] = case.fn.forward if is_vllm_compiled_module(case.fn) else case.fn  # type: ignore[attr-defined]
    return fn, context


def run_findings(case: Case, report: CloneReport, reference: Any) -> list[Any]:
    """Lost writes against the eager reference, and functions over ``max_recompiles``."""
    # lazy: the checker is loaded once a case runs, never by loading a case file
    from compile_checks.check.recompiles import recompile_findings

    if isinstance(reference, str):
        report.errors.append(reference)
        reference = None
    found: list[Any] = []
    if reference is not None:
        from compile_checks.pools import resolve_pools  # lazy: imports torch (see write_reference)

        report.errors += reference.errors
        found = list(reference.compare(resolve_pools(case.pools) or {}))
        report.notes += [n for n in reference.notes if n not in report.notes]
    return found + recompile_findings(report.recompiles, case.max_recompiles)


__all__ = ["run_findings", "write_reference"]
