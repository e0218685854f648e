"""``compile-checks repro TARGET [--case NAME] [--out FILE]``: one standalone file to paste into an upstream issue.

The case runs through the gate's check first (analysis-only, with its own settings and write check): the
region to write is the one where the gate found a copy (else a failing write finding, else the first
region with a custom op), and the gate's findings there are what the file expects
(:mod:`compile_checks.gate.repro_file` writes it). The region is then recorded by running the case again
with a backend that keeps each dynamo graph and its first real inputs (no Inductor).

The file compiles with the case's settings: its functionalization and the Inductor config of its
pipeline and its own (literal values), ``dynamic`` and ``mode``. What it cannot reproduce is said in the
file (docstring, ``CANNOT_REPRODUCE``, a note on stderr when it runs) and on this command's stderr:
a pipeline's own graph splitting and passes (``vllm-piecewise``), a config value that is no literal, and
every failing finding of the gate (a lost or undeclared write: the stand-in ops write only their
declared arguments).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from compile_checks.gate.repro_file import SMALL_INT_TENSOR, ReproSpec, custom_ops, write_repro
from compile_checks.gate.stderr_noise import terminal
from compile_checks.vocab import Pipeline


@dataclass
class RecordedGraph:
    """One dynamo graph and the real inputs of its first call."""

    gm: torch.fx.GraphModule
    dynamic: bool
    inputs: list[Any] | None = None


@dataclass
class Recorder:
    graphs: list[RecordedGraph] = field(default_factory=list)

    def backend(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
        dynamic = any(
            isinstance(x, torch.SymInt | torch.SymFloat)
            or (isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape))
            for x in example_inputs
        )
        graph = RecordedGraph(gm, dynamic)
        self.graphs.append(graph)

        def run(*args: Any) -> Any:
            if graph.inputs is None:
                graph.inputs = [_snapshot(a) for a in args]
            return gm.forward(*args)

        return run


def _snapshot(value: Any) -> Any:
    """An input as it was before the call: tensors cloned with their geometry and storage identity."""
    if not isinstance(value, torch.Tensor):
        return value
    storage = value.untyped_storage()
    return {
        "shape": tuple(value.shape),
        "stride": tuple(value.stride()),
        "offset": value.storage_offset(),
        "dtype": value.dtype,
        "storage": storage.data_ptr(),
        "storage_nbytes": storage.nbytes(),
        # integer tensors (slots, block tables) and scalars (a tensorified float, an eps) keep their values
        "values": value.detach().clone()
        if value.numel() <= (1 if value.is_floating_point() else SMALL_INT_TENSOR)
        else None,
    }


def record_case(case: Any) -> Recorder:
    """Run ``case`` once with a recording backend (each dynamo graph and its first real inputs, no Inductor)."""
    recorder = Recorder()
    torch._dynamo.reset()
    if case.reset is not None:
        case.reset()
    if case.compile is not None:
        compiled = case.compile(recorder.backend)
        target = case.fn if compiled is None else compiled
    else:
        target = torch.compile(case.fn, backend=recorder.backend, dynamic=case.dynamic, fullgraph=case.fullgraph)
    with torch.no_grad():
        if case.driver is not None:
            case.driver(target)
        else:
            target(*case.args, **dict(case.kwargs))
    torch._dynamo.reset()
    return recorder


def _literal(value: Any) -> bool:
    """A value the file can write as Python source (and read back as the same value)."""
    if isinstance(value, (list, tuple)):
        return all(map(_literal, value))
    if isinstance(value, dict):
        return all(isinstance(k, str) and _literal(v) for k, v in value.items())
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int, str))


def compile_settings(case: Any) -> tuple[dict[str, Any], list[str]]:
    """The Inductor config the case compiles with (as the check patches it) and what a file cannot reproduce."""
    from compile_checks.pipelines import resolve

    settings = resolve(case)
    config: dict[str, Any] = {"force_disable_caches": True}
    cannot: list[str] = []
    for key, value in sorted(settings.inductor_config.items()):
        if _literal(value):
            config[key] = value
        else:
            cannot.append(f"Inductor config {key}={type(value).__name__} (no literal value to write)")
    config["enable_auto_functionalized_v2"] = str(settings.functionalization) == "v2"
    if case.pipeline == Pipeline.VLLM_PIECEWISE:
        cannot.append("vLLM's piecewise graph splitting and its PostGradPassManager (pipeline vllm-piecewise)")
    return config, cannot


def _finding_line(f: Any) -> str:
    pool = f" on pool {f.pool!r}" if getattr(f, "pool", None) else ""
    op = f" ({f.op})" if getattr(f, "op", None) else ""
    return f"{f.kind}{pool}{op}"


def gate_verdict(report: Any, recorded: int) -> tuple[int | None, tuple[tuple[str, int], ...], tuple[str, ...]]:
    """(region, copies there, failing findings) of the gate's report: the region of its first copy, else of
    its first failing write finding, else None. Copies the check could not settle (upper bounds) are left out."""
    failing = [f for f in report.run_findings if f.fails]
    copies = [c for c in [*report.clones, *report.other_clones] if not c.upper_bound]
    regions = sorted({c.region for c in copies}) or sorted({f.region for f in failing if f.region is not None})
    region = regions[0] if regions and regions[0] < recorded else None
    here = [c for c in copies if region is not None and c.region == region]
    described = {
        (f"{c.kind} of {c.pool or c.arg} ({c.op} {c.arg}, {tuple(c.shape)} {str(c.dtype).removeprefix('torch.')})",
         int(c.nbytes))
        for c in here
    }  # fmt: skip
    findings = tuple(dict.fromkeys(_finding_line(f) for f in failing if getattr(f, "region", None) in (None, region)))
    return region, tuple(sorted(described)), findings


def repro_for(case: Any, report: Any, out: Path) -> tuple[Path, ReproSpec]:
    """The standalone file for ``case``, expecting what ``report`` (the gate's check of it) found."""
    recorder = record_case(case)
    graphs = [g for g in recorder.graphs if g.inputs is not None]
    if not graphs:
        raise ValueError(f"case {case.name!r}: no compiled graph ran, nothing to reproduce")
    region, copies, findings = gate_verdict(report, len(recorder.graphs))
    if region is not None and recorder.graphs[region].inputs is not None:
        graph = recorder.graphs[region]
    else:
        graph = next((g for g in graphs if custom_ops(g.gm)), graphs[0])
    config, cannot = compile_settings(case)
    what = "a pool copy or wrong write" if copies or findings else "no copy and no failing finding (the gate's verdict)"
    spec = ReproSpec(
        title=f"Repro of case {case.name!r}: {what}, by Inductor.",
        inductor_config=config,
        mode=case.mode,
        copies=copies,
        findings=tuple(f"{f} (its stand-in ops write only their declared arguments)" for f in findings),
        cannot=tuple(cannot),
    )
    return write_repro(graph.gm, graph.inputs or [], graph.dynamic, spec, out), spec


def _pick_case(spec: str, name: str | None) -> Any:
    from compile_checks.gate.targets import declared_cases
    from compile_checks.lazy_case import LazyCase

    declared = declared_cases(spec)
    names = [c.name for c in declared]
    if name is None and len(declared) != 1:
        raise ValueError(f"target {spec!r} has {len(declared)} cases ({', '.join(names)}): name one with --case NAME")
    chosen = next((c for c in declared if name is None or c.name == name), None)
    if chosen is None:
        raise ValueError(f"target {spec!r} has no case {name!r}; its cases: {', '.join(names)}")
    if not hasattr(chosen, "fn"):
        raise ValueError(f"case {chosen.name!r} is a ranked case: repro writes one region of a one-process case")
    return chosen.materialize() if isinstance(chosen, LazyCase) else chosen


def run_repro(spec: str, case_name: str | None, out: Path | None) -> Path:
    """``compile-checks repro``: the gate's check of the case (analysis-only), then its region as a file.

    What the file cannot reproduce is also said here, on stderr, one line each."""
    from compile_checks.case import run_case

    case = _pick_case(spec, case_name)
    result = run_case(case, analysis_only=True)
    target = out or Path(f"repro_{re.sub(r'[^A-Za-z0-9_]+', '_', case.name)}.py")
    path, written = repro_for(case, result.report, target)
    for line in (*written.findings, *written.cannot):
        print(f"repro: {path} cannot reproduce {line}", file=terminal())  # the real stderr, torch's held
    return path


__all__ = ["Recorder", "compile_settings", "gate_verdict", "record_case", "repro_for", "run_repro"]
