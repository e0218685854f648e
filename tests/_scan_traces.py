"""Produce TORCH_TRACE logs and the live check's verdicts for the scan's agreement tests (one process).

``python tests/_scan_traces.py OUT CASE...`` where CASE is ``scenario:NAME:PIPELINE``,
``engine:NAME:PIPELINE`` (``examples/engine``), ``dynamic:NAME:PIPELINE`` (the scenario with
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
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch
import torch._inductor.config as inductor_config
from _kernel_store import from_environment  # this script's folder is sys.path[0]
from torch._logging._internal import LazyTraceHandler, TorchLogsFormatter, trace_log

from compile_checks.case import Case, run_case
from compile_checks.scenarios import SCENARIOS, scenario_case
from compile_checks.vocab import Pipeline

ROOT = Path(__file__).resolve().parent.parent


def build(spec: str) -> tuple[Case, bool]:
    kind, name, pipeline = spec.split(":")
    if kind == "engine":
        sys.path.insert(0, str(ROOT / "examples" / "engine"))
        from cases import build_case  # the example engine's own factory

        case = build_case(name, expect_clean=name == "split")
        return case.replace(pipeline=Pipeline(pipeline)), False
    # one denoising step per chunk: only the commit graph is compiled (as the gate's codegen smoke);
    # ``dynamic:NAME``: the scenario compiled with dynamic=True (symbolic sizes in the logged graph)
    spec_ = dataclasses.replace(SCENARIOS[name], denoise_steps=1, **({"dynamic": True} if kind == "dynamic" else {}))
    case = scenario_case(spec_, Pipeline(pipeline))
    return case, kind == "analysis"


def traced(out: Path, spec: str) -> dict[str, object]:
    case, analysis_only = build(spec)
    handler = LazyTraceHandler(str(out / spec.replace(":", "-")))
    handler.setFormatter(TorchLogsFormatter(trace=True))
    trace_log.setLevel(logging.DEBUG)
    trace_log.addHandler(handler)
    t0 = time.perf_counter()
    try:
        result = run_case(case, analysis_only=analysis_only)
    finally:
        trace_log.removeHandler(handler)
        handler.close()
    report = result.report
    return {
        "spec": spec,
        "expect_clean": case.expect_clean,
        "clean": bool(report.clean),
        "problems": list(report.problems),
        "copies": sorted({(c.node, c.op, c.arg, c.nbytes, str(c.kind)) for c in report.clones}),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def main(argv: list[str]) -> int:
    inductor_config.force_disable_caches = True
    torch.manual_seed(0)
    if "SCAN_TRACE_DEVICE" in os.environ:  # a TorchFunctionMode: only when asked (it shows in stack traces)
        torch.set_default_device(os.environ["SCAN_TRACE_DEVICE"])
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    with from_environment():  # the test session's kernels, when run by test_scan_agreement
        for spec in argv[1:]:
            live = traced(out, spec)
            (out / f"{spec.replace(':', '-')}.live.json").write_text(json.dumps(live))
            print(json.dumps(live), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
