"""One planned case against a warm Inductor cache, traced and scanned: what production loads.

``python -m compile_checks.scan.warm_run PLANNED OUT TRACE_DIR DIR`` (``gate --inductor-cache DIR`` runs
it in a process of its own, which sets ``TORCHINDUCTOR_CACHE_DIR=DIR``: the gate's cold verdicts stay
untouched).
``PLANNED`` is a pickled list of :class:`~compile_checks.gate.plan.PlannedCase`, rebuilt as a ``--jobs``
worker rebuilds them (one process per cache folder pays one torch import). Each case is compiled the way
:mod:`compile_checks.case.floor` compiles it (Inductor's ``compile_fx`` with the pipeline's settings and
the case's), caches ON, under ``TORCH_TRACE`` into ``TRACE_DIR/<i>``; then the trace is read back by the
scan (:func:`~compile_checks.scan.trace.read_trace_files`, :func:`~compile_checks.scan.copies.scan_graph`):
each graph the caches served, its copies (the post-grad graph it loaded, settled by the generated code it
loaded) and its origin notes. ``OUT`` gets the JSON: one result per case.

The user's cache is read, never written: Inductor's CPU-ISA probe (g++ builds it keeps in the cache
folder) runs first, in the folder the process started with, before ``DIR`` is set; a compile the caches
do not serve stops before codegen (Inductor's ``fx_codegen_and_compile``) and runs eagerly instead
(nothing to compare: a cold compile is the gate's own verdict); the AOTAutograd cache's and Dynamo's
profile saves are no-ops.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock


class _NotServed(BaseException):
    """Raised where Inductor would compile (no cache served the graph): a BaseException, so Inductor's
    ``except Exception`` wrappers let it through to :func:`_backend`."""


@contextlib.contextmanager
def _traced(trace_dir: Path) -> Iterator[None]:
    from torch._logging._internal import LazyTraceHandler, TorchLogsFormatter, trace_log

    handler = LazyTraceHandler(str(trace_dir))
    handler.setFormatter(TorchLogsFormatter(trace=True))
    level = trace_log.level
    trace_log.setLevel(logging.DEBUG)
    trace_log.addHandler(handler)
    try:
        yield
    finally:
        trace_log.removeHandler(handler)
        trace_log.setLevel(level)
        handler.close()


MAX_CALLS_RECORDED = 64  # per compiled graph: the sizes of its first calls (a host loop may call it thousands of times)


def _compile_id() -> str:
    """The compile under way as the trace names it (``0/1``: frame id / frame compile id)."""
    from torch._guards import CompileContext

    cid = CompileContext.current_compile_id()
    return f"{cid.frame_id}/{cid.frame_compile_id}" if cid is not None else "?"


def _recording(compiled: Callable[..., Any], calls: list[list[Any]]) -> Callable[..., Any]:
    """``compiled``, recording each call's argument sizes (:func:`~compile_checks.scan.call_sizes.call_sizes`)."""
    from compile_checks.scan.call_sizes import call_sizes

    def run(*args: Any) -> Any:
        if len(calls) < MAX_CALLS_RECORDED:
            calls.append(call_sizes(args))
        return compiled(*args)

    return run


@contextlib.contextmanager
def _served_only(
    patches: dict[str, Any], missed: list[str], calls: dict[str, list[list[Any]]]
) -> Iterator[Callable[..., Any]]:
    """A dynamo backend: ``compile_fx`` with caches on, that compiles nothing the caches do not serve;
    each served graph's calls have their sizes recorded in ``calls`` (by compile id).

    Raises RuntimeError when this torch has no ``fx_codegen_and_compile`` to stop (the run would compile,
    and write the user's cache); the saves that torch may lack are simply not there to turn off.
    """
    import torch
    import torch._inductor.config as inductor_config
    from torch._dynamo import convert_frame, pgo
    from torch._functorch._aot_autograd import autograd_cache
    from torch._inductor import compile_fx as compile_fx_module

    if not hasattr(compile_fx_module, "fx_codegen_and_compile"):
        raise RuntimeError("this torch has no torch._inductor.compile_fx.fx_codegen_and_compile to stop at")

    def not_served(*_args: Any, **_kwargs: Any) -> Any:
        raise _NotServed

    def backend(gm: Any, example_inputs: Any) -> Any:
        cid = _compile_id()
        try:
            compiled = compile_fx_module.compile_fx(gm, example_inputs)
        except _NotServed:
            missed.append(gm.__class__.__name__)
            return gm.forward
        if not callable(compiled):  # an AOT-mode artifact (a path), not a callable: nothing to record
            return compiled
        return _recording(compiled, calls.setdefault(cid, []))

    def nothing(*_args: Any, **_kwargs: Any) -> None:
        return None

    saves = [
        (getattr(autograd_cache, "AOTAutogradCache", None), "save", staticmethod(nothing)),
        (pgo, "put_code_state", nothing),
        (convert_frame, "put_code_state", nothing),  # imported by name there
    ]
    torch._dynamo.reset()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(inductor_config.patch({**patches, "force_disable_caches": False}))
            stack.enter_context(mock.patch.object(compile_fx_module, "fx_codegen_and_compile", not_served))
            for owner, name, value in saves:
                if owner is not None and hasattr(owner, name):
                    stack.enter_context(mock.patch.object(owner, name, value))
            yield backend
    finally:
        torch._dynamo.reset()


def warm_run(planned: Any, trace_dir: Path, builder: Any) -> dict[str, Any]:
    """The case against the caches of this process's ``TORCHINDUCTOR_CACHE_DIR``: each served graph's scan."""
    import torch

    from compile_checks.case.floor import run_through
    from compile_checks.pipelines import resolve
    from compile_checks.ranks import RankedCase
    from compile_checks.scan.call_sizes import bind_symbols, nbytes_per_call
    from compile_checks.scan.copies import scan_graph
    from compile_checks.scan.inputs import PoolMap
    from compile_checks.scan.trace import TRACE_PREFIX, read_trace_files

    t0 = time.perf_counter()
    case = builder.take(planned)
    if isinstance(case, RankedCase):
        return {"skipped": "a ranked case: its ranks are not run against the cache", "graphs": [], "missed": 0}
    settings = resolve(case)
    patches = {
        **(torch._inductor.list_mode_options(case.mode) if case.mode else {}),
        **settings.inductor_config,
        "enable_auto_functionalized_v2": settings.functionalization == "v2",
    }
    missed: list[str] = []
    calls: dict[str, list[list[Any]]] = {}
    from torch._dynamo.utils import counters

    counters.clear()
    with _traced(trace_dir), _served_only(patches, missed, calls) as backend:
        run_through(case, backend)
    # torch's own hit/miss counts: beside the trace's records, so a torch that logs hits otherwise shows
    hits = {f"{group}.{name}": n for group in ("aot_autograd", "inductor") for name, n in counters[group].items()}
    hits = {k: v for k, v in hits.items() if "cache" in k}
    graphs = []
    for i, art in enumerate(read_trace_files(sorted(trace_dir.glob(TRACE_PREFIX + "*")))):
        if not art.served_from:
            continue
        s = scan_graph(art, PoolMap({}), i)
        bindings = bind_symbols(art.post_grad or "", calls.get(art.compile_id, [])) if art.post_grad else []
        copies = []
        for c in s.copies:
            copy = {k: c[k] for k in ("nbytes", "input", "op", "arg", "shape", "dtype")}
            if isinstance(c["nbytes"], str):  # symbolic: its bytes at each call's sizes
                copy["nbytes_per_call"] = nbytes_per_call(c["nbytes"], bindings)
            copies.append(copy)
        graphs.append(
            {
                "label": art.label,
                "compile_id": art.compile_id,
                "served_from": list(art.served_from),
                "copies": copies,
                "calls": len(calls.get(art.compile_id, [])),
                "notes": s.notes,
                "problems": s.problems,
                "error": s.error,
            }
        )
    return {"graphs": graphs, "missed": len(missed), "counters": hits, "seconds": round(time.perf_counter() - t0, 2)}


def main(argv: list[str]) -> int:
    from compile_checks.pipelines.vllm_env import prepare_process_for_vllm

    prepare_process_for_vllm()  # before a case can import vLLM, as the gate's CLI does
    from compile_checks.gate.one_case import CaseBuilder
    from compile_checks.pipelines import probe_cpu_isa

    probe_cpu_isa()  # kept by this process: never built into DIR (four g++ builds there otherwise)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = argv[3]

    cases = pickle.loads(Path(argv[0]).read_bytes())  # written by the gate (compile_checks.gate.warm_cache)
    builder = CaseBuilder()
    results = []
    for i, planned in enumerate(cases):
        folder = Path(argv[2]) / str(i)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            results.append(warm_run(planned, folder, builder))
        except Exception as e:  # this case's error, never the other cases'
            results.append({"error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}", "graphs": []})
    Path(argv[1]).write_text(json.dumps(results, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
