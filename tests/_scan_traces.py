"""Produce TORCH_TRACE logs and the live check's verdicts for the scan's agreement tests (one process).

``python tests/_scan_traces.py OUT CASE...`` where CASE is ``scenario:NAME:PIPELINE``,
``engine:NAME:PIPELINE`` (``examples/engine``), ``newcomer:paged_lm:PIPELINE`` (``tests/_paged_lm.py``), ``dynamic:NAME:PIPELINE`` (the scenario with
``dynamic=True``) or ``analysis:NAME:PIPELINE`` (a scenario run
analysis-only: its trace has no post-grad graph); ``SCAN_TRACE_DEVICE=cuda`` builds the cases'
tensors on that device (``torch.set_default_device``: the GPU half of scripts/gpu_check.sh).
Each case is compiled *fully* (a production compile: the analysis-only gate stops before Inductor
logs its post-grad graph) under the live
check, with torch's own structured-trace handler writing to ``OUT/<case>/``; the live verdict is
written beside it as ``OUT/<case>.live.json``. The trace is what torch logged, read back only by
the scan.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch
import torch._inductor.config as inductor_config
from _checks import COMMIT_GRAPH_ONLY  # this script's folder is sys.path[0] (or the tests' in pytest)
from _kernel_store import from_environment
from torch._logging._internal import LazyTraceHandler, TorchLogsFormatter, trace_log

from compile_checks.case import Case, run_case
from compile_checks.scenarios import SCENARIOS, scenario_case
from compile_checks.vocab import Pipeline

ROOT = Path(__file__).resolve().parent.parent


def build(spec: str) -> tuple[Case, bool]:
    kind, name, pipeline = spec.split(":")
    if kind == "newcomer":  # tests/_paged_lm.py's case NAME
        from _paged_lm import paged_lm  # this script's folder is sys.path[0] (or the tests' in pytest)

        return {"paged_lm": paged_lm}[name]().replace(pipeline=Pipeline(pipeline)), False
    if kind == "engine":
        case = _engine_cases().build_case(name, expect_clean=name == "split")
        return case.replace(pipeline=Pipeline(pipeline)), False
    # the commit graph only, as the generated-code truths compile it (_checks.COMMIT_GRAPH_ONLY: their
    # kernels built once); ``dynamic:NAME``: compiled with dynamic=True (symbolic sizes in the logged graph)
    shrink = {**COMMIT_GRAPH_ONLY, **({"dynamic": True} if kind == "dynamic" else {})}
    spec_ = dataclasses.replace(SCENARIOS[name], **shrink)
    case = scenario_case(spec_, Pipeline(pipeline))
    return case, kind == "analysis"


def _engine_cases() -> Any:
    """examples/engine/cases.py under a name of its own: a test process may already hold another
    example's ``cases`` module (test_writes_blocks_example imports examples/engine_blocks' at collection)."""
    name = "_scan_traces_engine_cases"
    if name not in sys.modules:
        folder = ROOT / "examples" / "engine"
        spec = importlib.util.spec_from_file_location(name, folder / "cases.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(folder))  # its sibling toy_dit.py, as the gate loads a target file
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(folder))
        sys.modules[name] = module
    return sys.modules[name]


def traced(out: Path, spec: str) -> dict[str, object]:
    case, analysis_only = build(spec)
    handler = LazyTraceHandler(str(out / spec.replace(":", "-")))
    handler.setFormatter(TorchLogsFormatter(trace=True))
    level = trace_log.level
    trace_log.setLevel(logging.DEBUG)
    trace_log.addHandler(handler)
    t0 = time.perf_counter()
    try:
        result = run_case(case, analysis_only=analysis_only)
    finally:
        trace_log.removeHandler(handler)
        trace_log.setLevel(level)
        handler.close()
    report = result.report
    return {
        "spec": spec,
        "expect_clean": case.expect_clean,
        "clean": bool(report.clean),
        "problems": list(report.problems),
        "copies": sorted({(c.node, c.op, c.arg, c.nbytes, str(c.kind)) for c in report.clones}),
        # the cause the live check gives each copy (its clone node), for the scan's one-cause test
        "causes": {c.node: str(c.explanation.cause) if c.explanation else None for c in report.clones},
        "seconds": round(time.perf_counter() - t0, 2),
    }


def produce(out: Path, specs: list[str]) -> None:
    """Each spec's trace folder and live verdict under ``out``, in this process (test_scan_agreement's
    session fixture calls it in its pytest worker: no second torch / vLLM import)."""
    inductor_config.force_disable_caches = True
    torch.manual_seed(0)
    out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        live = traced(out, spec)
        (out / f"{spec.replace(':', '-')}.live.json").write_text(json.dumps(live))
        print(json.dumps(live), flush=True)


def main(argv: list[str]) -> int:
    if "SCAN_TRACE_DEVICE" in os.environ:  # a TorchFunctionMode: only when asked (it shows in stack traces)
        torch.set_default_device(os.environ["SCAN_TRACE_DEVICE"])
    with from_environment():  # the test session's kernels, when asked (TESTS_KERNEL_STORE)
        produce(Path(argv[0]), argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
