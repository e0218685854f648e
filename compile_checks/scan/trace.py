"""``TORCH_TRACE`` structured logs (what tlparse reads) as :class:`GraphArtifacts`, one per post-grad graph.

Each record is one line, a glog-style prefix then a JSON object (``torch._logging._internal``
``TorchLogsFormatter`` with ``_is_trace``): the event's name as its first key, the compile it
belongs to (``frame_id``, ``frame_compile_id``, ``attempt``, ``rank`` under torch.distributed)
and ``has_payload``, the md5 of the payload that follows as tab-indented lines. The hash is
checked for every record the scan reads, so a log cut short by a killed job is an error, never
a shorter (cleaner) list of graphs. The events read:

* ``dynamo_output_graph``: the Dynamo graph (placeholder names from the inputs' sources);
* ``describe_tensor`` / ``describe_source``: each input's storage id and source (``L['k_pools'][0]``);
* ``aot_inference_graph`` / ``aot_forward_graph``: AOT's graph, whose placeholders say which Dynamo
  input they are (``# PlainAOTInput(idx=6)``);
* ``artifact`` ``inductor_post_grad_graph``: the graph Inductor lowers, logged after every post-grad
  pass (reinplacing, ``decompose_auto_functionalized``), by ``compile_fx`` (torch/_inductor/compile_fx.py);
  on an FX graph cache hit the same text is its own ``inductor_post_grad_graph`` event (codecache.py);
* ``inductor_output_code``: the generated wrapper code (torch/_inductor/graph.py);
* ``artifact`` ``aotautograd_cache_hit`` / ``fx_graph_cache_hit``: the compile was served from a cache
  (:mod:`compile_checks.scan.cache_origin` says so, and whether the artifact's aliasing is the inputs');
* ``compilation_metrics``: Dynamo's last record of every compile (``_compile``'s ``finally``), with its
  ``fail_type`` / ``fail_reason``. A compile that logged a graph but no ``compilation_metrics`` is a log
  cut at a record boundary (a :class:`TruncatedTraceError`, as a cut payload is); one whose metrics name a
  ``fail_type`` (``InductorError``, ``BackendCompilerFailed``...) failed: its graph never ran compiled
  (``GraphArtifacts.compile_failure``, an error of that graph).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compile_checks.scan.artifacts import GraphArtifacts, InputSource, TruncatedTraceError, UnknownFormatError
from compile_checks.scan.cache_origin import SERVED_BY, origin_notes
from compile_checks.scan.fx_text import GraphTextError, forward_parameters

# ``[rank0]:V1203 19:28:16.034000 6297 torch/_dynamo/output_graph.py:2942] {...}``
_RECORD = re.compile(r"^(?:\[rank(?P<rank>\d+)\]:)?[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]*:\d+\] (?P<json>\{.*)$")
_FILE_RANK = re.compile(r"rank_(\d+)")
_AOT_INPUT = re.compile(r"^\s*(\w+): .*# PlainAOTInput\(idx=(\d+)\)")
TRACE_PREFIX = "dedicated_log_torch_trace_"


@dataclass
class Record:
    """One structured-trace event: its name, metadata, and payload (None: the event has none)."""

    name: str
    meta: dict[str, Any]
    payload: str | None
    line: int


def is_trace_file(path: Path) -> bool:
    """The first line is a structured-trace record (cheap: reads one line)."""
    with path.open(encoding="utf-8", errors="replace") as f:
        return bool(_RECORD.match(f.readline().rstrip("\n")))


def read_records(path: Path) -> Iterator[Record]:
    """Every record of one log, payloads checked against their hash."""
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines):
        m = _RECORD.match(lines[i])
        if m is None:
            if i == 0:
                raise UnknownFormatError(f"{path}: not a TORCH_TRACE structured log (line 1: {lines[0][:80]!r})")
            raise TruncatedTraceError(f"{path}:{i + 1}: not a trace record: {lines[i][:80]!r}")
        try:
            meta = json.loads(m.group("json"))
        except json.JSONDecodeError as e:
            raise TruncatedTraceError(f"{path}:{i + 1}: a record cut short ({e})") from None
        j = i + 1
        while j < len(lines) and lines[j].startswith("\t"):
            j += 1
        payload = None
        if "has_payload" in meta:
            payload = "\n".join(line[1:] for line in lines[i + 1 : j])
            if hashlib.md5(payload.encode("utf-8"), usedforsecurity=False).hexdigest() != meta["has_payload"]:
                raise TruncatedTraceError(
                    f"{path}:{i + 1}: the payload of {next(iter(meta), '?')!r} does not match its logged hash "
                    "(the log was cut short or edited)"
                )
        if m.group("rank") is not None:
            meta.setdefault("rank", int(m.group("rank")))
        yield Record(next(iter(meta)), meta, payload, i + 1)
        i = j


@dataclass
class _Compile:
    """The records of one compile (frame id / frame compile id), its latest attempt only."""

    rank: int | None
    compile_id: str
    attempt: int = 0
    dynamo_graph: str | None = None
    aot_graphs: list[str] = field(default_factory=list)
    post_grad: list[str] = field(default_factory=list)
    output_code: list[str] = field(default_factory=list)
    output_files: list[str | None] = field(default_factory=list)  # each output code's logged filename
    tensors: dict[int, dict[str, Any]] = field(default_factory=dict)
    sources: dict[int, str] = field(default_factory=dict)
    served: list[str] = field(default_factory=list)  # CacheServed artifacts logged (a cache served it)
    finished: bool = False  # its compilation_metrics record was logged (the compile ended)
    failure: str | None = None  # ``fail_type: fail_reason`` of a failed compile


def _compile_id(meta: dict[str, Any]) -> str | None:
    if "frame_id" not in meta:
        return None
    cid = f"{meta['frame_id']}/{meta.get('frame_compile_id', '-')}"
    return f"!{meta['compiled_autograd_id']}/{cid}" if "compiled_autograd_id" in meta else cid


def _add(c: _Compile, r: Record) -> None:
    if r.name == "dynamo_output_graph":
        c.dynamo_graph = r.payload
    elif r.name in ("aot_inference_graph", "aot_forward_graph") and r.payload is not None:
        c.aot_graphs.append(r.payload)
    elif r.name == "inductor_post_grad_graph" or (
        r.name == "artifact" and r.meta["artifact"].get("name") == "inductor_post_grad_graph"
    ):  # an event of its own on an FX-graph-cache hit (codecache.py), an artifact when compiled
        c.post_grad.append(r.payload or "")
    elif r.name == "artifact" and r.meta["artifact"].get("name") in SERVED_BY:
        c.served.append(str(r.meta["artifact"]["name"]))
    elif r.name == "inductor_output_code" and r.payload is not None:
        c.output_code.append(r.payload)
        info = r.meta.get("inductor_output_code")
        filename = info.get("filename") if isinstance(info, dict) else None
        c.output_files.append(str(filename) if filename else None)
    elif r.name == "compilation_metrics":
        c.finished = True
        metrics = r.meta["compilation_metrics"]
        fail_type = metrics.get("fail_type") if isinstance(metrics, dict) else None
        if fail_type:
            reason = str(metrics.get("fail_reason") or "").strip().split("\n", 1)[0]
            c.failure = f"{fail_type}: {reason[:200]}" if reason else str(fail_type)
    elif r.name == "describe_tensor":
        c.tensors[int(r.meta["describe_tensor"]["id"])] = r.meta["describe_tensor"]
    elif r.name == "describe_source":
        c.sources[int(r.meta["describe_source"]["id"])] = str(r.meta["describe_source"]["source"])


def _placeholders(code: str | None) -> list[str]:
    """The ``forward`` parameters of a ``print_readable`` graph, in order (none when it does not parse)."""
    if not code:
        return []
    try:
        return forward_parameters(code)
    except GraphTextError:
        return []


def _dynamo_name(source: str) -> str:
    """Dynamo's placeholder name for an input source (``L['k_pools'][0]`` -> ``L_k_pools_0_``)."""
    return re.sub(r"[^a-zA-Z0-9]+", "_", source)


def _inputs(c: _Compile) -> dict[str, InputSource]:
    """Post-grad placeholder -> the Dynamo input it is (by AOT's ``PlainAOTInput(idx=)``), with its source.

    Only for a compile with one AOT graph: a piecewise backend's pieces take intermediate values
    of the Dynamo graph, which no source names.
    """
    if len(c.aot_graphs) != 1:
        return {}
    dynamo_args = _placeholders(c.dynamo_graph)
    by_name = {_dynamo_name(src): tid for tid, src in c.sources.items()}
    out: dict[str, InputSource] = {}
    for line in c.aot_graphs[0].splitlines():
        m = _AOT_INPUT.match(line)
        if m is None:
            continue
        idx = int(m.group(2))
        name = dynamo_args[idx] if idx < len(dynamo_args) else m.group(1)
        tid = by_name.get(name)
        tensor = c.tensors.get(tid, {}) if tid is not None else {}
        out[m.group(1)] = InputSource(
            index=idx,
            name=name,
            source=c.sources.get(tid) if tid is not None else None,
            storage=tensor.get("storage"),
            storage_offset=int(tensor.get("storage_offset", 0)),
        )
    return out


def read_trace_files(paths: list[Path]) -> list[GraphArtifacts]:
    """Every compile of every log (one log per rank / process), one entry per post-grad graph.

    A compile with a Dynamo graph but no post-grad graph is kept with ``post_grad=None``, a failed
    one with its ``compile_failure``: the command reports both as errors (exit 4). Raises
    :class:`TruncatedTraceError` for a compile whose ``compilation_metrics`` record is missing.
    """
    out: list[GraphArtifacts] = []
    for path in paths:
        compiles: dict[str, _Compile] = {}
        file_rank = _FILE_RANK.search(path.name)
        for r in read_records(path):
            cid = _compile_id(r.meta)
            if cid is None:
                continue
            rank = r.meta.get("rank", int(file_rank.group(1)) if file_rank else None)
            attempt = int(r.meta.get("attempt", 0))
            c = compiles.get(cid)
            if c is None or attempt > c.attempt:  # a restarted compile: only its last attempt counts
                c = compiles[cid] = _Compile(rank, cid, attempt)
            if attempt == c.attempt:
                _add(c, r)
        for c in compiles.values():
            if c.dynamo_graph is None and not c.post_grad:
                continue  # a frame Dynamo skipped, or events of no graph
            if not c.finished:
                raise TruncatedTraceError(
                    f"{path}: compile [{c.compile_id}] has no compilation_metrics record (Dynamo logs one as each "
                    "compile ends): the log was cut short, or read while the job was still compiling"
                )
            inputs = _inputs(c)
            notes = [f"compile attempt {c.attempt} (earlier attempts restarted)"] if c.attempt else []
            if c.output_code and len(c.output_code) != len(c.post_grad):
                notes.append(f"{len(c.post_grad)} post-grad graph(s) but {len(c.output_code)} output code(s)")
            for k, graph in enumerate(c.post_grad or [None]):
                art = GraphArtifacts(
                    origin=str(path),
                    rank=c.rank,
                    compile_id=c.compile_id,
                    index=k,
                    post_grad=graph,
                    output_code=c.output_code[k] if k < len(c.output_code) else None,
                    output_file=c.output_files[k] if k < len(c.output_files) else None,
                    dynamo_graph=c.dynamo_graph,
                    aot_graph=c.aot_graphs[k] if k < len(c.aot_graphs) else None,
                    inputs=inputs,
                    notes=list(notes),
                    served_from=tuple(name for name in SERVED_BY if name in c.served),
                    compile_failure=c.failure,
                )
                art.notes += origin_notes(art)
                out.append(art)
    return out


__all__ = ["TRACE_PREFIX", "Record", "is_trace_file", "read_records", "read_trace_files"]
