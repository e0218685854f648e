"""The check's findings in the structured trace (``TORCH_TRACE``), beside the graph each belongs to.

When a structured trace is being recorded (``TORCH_TRACE=<dir>``), every compiled region's findings
are logged as one ``artifact`` event named :data:`ARTIFACT` (JSON), the way Inductor logs its
passes (``trace_structured("artifact", metadata_fn=..., payload_fn=...)``), inside that region's
compile context: the compile id and attempt dynamo gave the graph
(:attr:`compile_checks.check.backend.Region.trace_id`). ``tlparse`` on the trace then lists the
artifact in that compile's folder, next to its ``inductor_post_grad_graph`` and output code.

The payload is per region: how often it ran, each surviving copy as the report has it
(:meth:`~compile_checks.check.findings.SurvivingClone.to_dict`: op, argument, pool, bytes, node,
why and the fix), copies of unnamed inputs, each mutated argument's reinplace decision, and the
region's notes and errors. A clean region is logged too (``"copies": []``): the check saw it. The
findings are complete only once the session ends (pools and bytes come from the region's calls),
so they are logged then, re-entering each region's compile context. Nothing is logged when no
trace is recorded: ``trace_structured`` has no handler then, and the payload is never built.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

from torch._guards import CompileContext, compile_context
from torch._logging import trace_structured
from torch._logging._internal import trace_log

from compile_checks.check.findings import CloneReport

ARTIFACT = "compile_checks_copies"
# bumped when a payload key changes meaning
PAYLOAD_VERSION = 1


def recording() -> bool:
    """A structured trace is being written (``TORCH_TRACE``, or a handler a tool installed)."""
    return bool(trace_log.handlers)


@contextlib.contextmanager
def _compile_of(trace_id: Any) -> Iterator[None]:
    """The compile context the region was compiled in (``torch._guards.TraceId``: compile id, attempt)."""
    if trace_id is None:
        yield
        return
    context = CompileContext(trace_id.compile_id)
    context.attempt = trace_id.attempt
    with compile_context(context):
        yield


def _region_notes(lines: Sequence[str], index: int) -> list[str]:
    prefix = f"region {index}"
    return [line for line in lines if line.startswith((f"{prefix}:", f"{prefix} ("))]


def region_payload(report: CloneReport, index: int, compiled_fn_name: str = "") -> dict[str, Any]:
    """What one region's artifact holds (JSON-ready).

    ``version``: the payload's version (bumped when a key changes meaning); ``region``: the region's index,
    in compile order; ``compiled_fn``: dynamo's name for it (``__compiled_fn_N``); ``calls``: how many times it
    ran under the check; ``clean``: no copy survived in it; ``copies``: each surviving copy of a named pool, as
    in the report (``SurvivingClone``: op, argument, pool, bytes, node, explanation); ``bytes_per_call``: bytes
    its copies move in one call; ``other_copies``: copies of mutated inputs that match no named pool;
    ``mutated_args``: each mutated argument of each functionalized op call, reinplaced or cloned; ``notes``:
    the report's notes on this region (such as PyTorch's ReinplaceCounters disagreeing); ``errors``: what
    made the check fail on it, and parts it could not analyse.
    """
    copies = [c.to_dict() for c in report.clones if c.region == index]
    return {
        "version": PAYLOAD_VERSION,
        "region": index,
        "compiled_fn": compiled_fn_name,
        "calls": report.region_calls.get(index, 0),
        "clean": not copies and not any(c.region == index for c in report.other_clones),
        "copies": copies,
        "bytes_per_call": sum(c["nbytes"] for c in copies),
        "other_copies": [c.to_dict() for c in report.other_clones if c.region == index],
        "mutated_args": [asdict(m) for m in report.mutated_args if m.region == index],
        "notes": _region_notes(report.notes, index),
        "errors": _region_notes([*report.errors, *report.unanalysed], index),
    }


def log_findings(report: CloneReport, regions: Sequence[Any]) -> int:
    """Log one :data:`ARTIFACT` per region (``regions``: the probe's, in compile order); how many were logged.

    Each event carries the region's compile id and attempt, so it lands beside that compile's graphs.
    """
    if not recording():
        return 0
    for region in regions:
        text = json.dumps(region_payload(report, region.index, region.compiled_fn_name), indent=1, default=str)
        with _compile_of(getattr(region, "trace_id", None)):
            trace_structured(
                "artifact",
                metadata_fn=lambda: {"name": ARTIFACT, "encoding": "json"},
                payload_fn=functools.partial(str, text),
            )
    return len(regions)


__all__ = ["ARTIFACT", "PAYLOAD_VERSION", "log_findings", "recording", "region_payload"]
