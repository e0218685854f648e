"""Memory traffic of a scenario run: what surviving clones cost next to the ideal.

Pure functions from a ``ScenarioResult`` (``compile_checks.scenarios``) to one
``TrafficRow``, and from rows to a pandas table. No torch.compile here, so the
arithmetic is testable on synthetic findings.

Accounting (why it is done this way):

* A surviving clone runs every time its compiled region runs and reads + writes
  its bytes (``SurvivingClone.traffic_bytes``). Its cost over the run is
  ``traffic_bytes * region_calls[clone.region]``; dividing by the run's steps /
  chunks gives per step / per chunk. A clone in the commit-step region therefore
  counts once per chunk, not once per step. The analysis lists a clone once per
  pool it hit, so one clone node of a region that serves layer 0 and layer 1 in
  turn appears twice (``layer0.v``, ``layer1.v``) while it runs once per call:
  bytes are counted once per distinct ``(region, node)``; ``surviving_clones``
  is the analysis's count (pool hits), ``clone_nodes`` the distinct copies.
* The ideal traffic is what the step must move no matter how the pool is laid
  out: the resident window's K/V read on every step, plus the chunk's K/V write
  on its commit step. It does not grow with the pool. ``ideal_bytes_per_step``
  and ``ideal_bytes_per_chunk`` are *averages over the run* (early chunks have a
  shorter window, and only one step in ``denoise_steps`` writes).
  ``ideal_bytes_per_video`` is the window model over ``video_chunks`` chunks (the
  window fills, then stays full) when that model reproduces the run's own ideal
  bytes exactly, else the run's per-chunk average times ``video_chunks``
  (``ideal_video_method`` says which).
* Clones cost the same every chunk, so per video = per chunk x ``video_chunks``.
* ``kernel_bytes_per_step`` is Inductor's own count of the bytes its kernels
  touch, weighted the same way: an independent cross-check that moves with the
  clones. It is not a traffic measurement: Inductor counts a mutated or
  gathered buffer whole, so it grows with the pool even for a clean layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from compile_checks.findings import CloneReport, SurvivingClone

DEFAULT_VIDEO_CHUNKS = 60
MIB = 1 << 20


@dataclass(frozen=True)
class TrafficRow:
    """One scenario's traffic; byte counts are per run-average step unless named otherwise."""

    scenario: str
    layout: str
    num_layers: int
    layers_per_region: int
    dtype: str
    batch: int
    pool_bytes: int  # all layers, K + V
    chunk_size: int
    denoise_steps: int
    dynamic: bool
    functionalization: str
    expect_clean: bool
    surviving_clones: int
    clone_nodes: int
    other_clones: int  # clones of caller tensors that are not a named pool (not in the bytes)
    clone_bytes_per_step: float
    ideal_bytes_per_step: float
    traffic_ratio: float
    clone_bytes_per_chunk: float
    ideal_bytes_per_chunk: float
    video_chunks: int
    clone_bytes_per_video: float
    ideal_bytes_per_video: float
    video_traffic_ratio: float
    ideal_video_method: str
    kernel_bytes_per_step: float
    num_steps: int
    num_chunks: int
    compile_seconds: float
    wall_seconds: float
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def executed_clones(report: CloneReport) -> list[SurvivingClone]:
    """One entry per clone that runs: distinct ``(region, node)`` (entries without a node stay distinct)."""
    seen: set[tuple[int, str]] = set()
    out: list[SurvivingClone] = []
    for c in report.clones:
        if c.node:
            if (c.region, c.node) in seen:
                continue
            seen.add((c.region, c.node))
        out.append(c)
    return out


def clone_bytes_per_run(report: CloneReport) -> int:
    """Bytes all surviving clones move over the whole run (each clone once per call of its region)."""
    return sum(c.traffic_bytes * report.region_calls.get(c.region, 0) for c in executed_clones(report))


def kernel_bytes_per_run(report: CloneReport) -> int:
    """Inductor's kernel byte count over the run: per-call bytes of each region times its calls."""
    return sum(nbytes * report.region_calls.get(region, 0) for region, nbytes in report.region_kernel_bytes.items())


def per_unit(total: float, units: int) -> float:
    """``total / units``, 0 for an empty run (a run with no steps moved nothing we can divide)."""
    return total / units if units > 0 else 0.0


def traffic_ratio(ideal_bytes: float, clone_bytes: float) -> float:
    """(ideal + clone) / ideal: 1.0 means no traffic beyond the ideal."""
    if ideal_bytes > 0:
        return (ideal_bytes + clone_bytes) / ideal_bytes
    return 1.0 if clone_bytes == 0 else math.inf


def format_bytes(n: float) -> str:
    """Binary-unit size for humans (tables keep raw bytes in the CSV)."""
    if not math.isfinite(n):
        return str(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def verdict(
    name: str, expect_clean: bool, clones: int, clone_bytes_per_step: float, ratio: float, copies: int | None = None
) -> str:
    """One line: did the scenario do what it is there for, and what the clones cost."""
    if clones == 0:
        status = "clean" if expect_clean else "UNEXPECTEDLY CLEAN (negative control did not reproduce)"
        return f"{name}: {status}: 0 clones, traffic = ideal"
    status = "REGRESSION" if expect_clean else "expected clones (negative control)"
    distinct = "" if copies is None or copies == clones else f" ({copies} distinct cop{'ies' if copies != 1 else 'y'})"
    return (
        f"{name}: {status}: {clones} clone{'s' if clones != 1 else ''}{distinct}, "
        f"{format_bytes(clone_bytes_per_step)}/step beyond ideal = {ratio:.2f}x ideal"
    )


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _total_pool_bytes(scenario: Any) -> int:
    """All layers' K + V pools; computed from the geometry if the scenario lacks the property."""
    total = getattr(scenario, "total_pool_bytes", None)
    if total is not None:
        return int(total)
    return 2 * scenario.num_layers * scenario.num_blocks * scenario.block_size * _token_bytes(scenario)


def _token_bytes(scenario: Any) -> int:
    import torch

    itemsize = torch.empty((), dtype=scenario.dtype).element_size()
    return scenario.num_kv_heads * scenario.head_dim * itemsize


def resident_tokens(chunk_index: int, chunk_size: int, window_chunks: int, sink_chunks: int) -> int:
    """Tokens resident (per sequence) while chunk ``chunk_index`` is denoised: all before it, capped
    at sink + window chunks (the sliding chunk window keeps the sink and the last chunks)."""
    return min(chunk_index, sink_chunks + window_chunks) * chunk_size


def ideal_video_bytes(scenario: Any, num_chunks: int) -> int | None:
    """Window model of the ideal traffic of ``num_chunks`` chunks: every step reads the resident
    window's K/V, every chunk writes its own K/V once (all layers, all sequences).
    None when the scenario does not describe its window."""
    window = getattr(scenario, "window_chunks", None)
    sink = getattr(scenario, "sink_chunks", None)
    if window is None or sink is None:
        return None
    kv_layer_seq = 2 * scenario.num_layers * getattr(scenario, "batch", 1) * _token_bytes(scenario)
    reads = sum(
        resident_tokens(c, scenario.chunk_size, window, sink) for c in range(num_chunks)
    ) * scenario.denoise_steps
    writes = num_chunks * scenario.chunk_size
    return kv_layer_seq * (reads + writes)


def traffic_row(result: Any, video_chunks: int = DEFAULT_VIDEO_CHUNKS) -> TrafficRow:
    """A ``ScenarioResult`` as one table row (see the module docstring for the accounting)."""
    if video_chunks < 1:
        raise ValueError(f"video_chunks must be >= 1, got {video_chunks}")
    s = result.scenario
    report: CloneReport = result.report
    clone_run = clone_bytes_per_run(report)
    ideal_run = result.ideal_read_bytes + result.ideal_write_bytes
    clone_step = per_unit(clone_run, result.num_steps)
    ideal_step = per_unit(ideal_run, result.num_steps)
    clone_chunk = per_unit(clone_run, result.num_chunks)
    ideal_chunk = per_unit(ideal_run, result.num_chunks)
    ratio = traffic_ratio(ideal_step, clone_step)
    modelled = ideal_video_bytes(s, result.num_chunks)
    if modelled is not None and modelled == ideal_run:
        ideal_video = float(ideal_video_bytes(s, video_chunks))  # type: ignore[arg-type]
        method = "window model"
    else:
        ideal_video = ideal_chunk * video_chunks
        method = "run average x chunks"
    clone_video = clone_chunk * video_chunks
    expect_clean = bool(getattr(s, "expect_clean", True))
    return TrafficRow(
        scenario=s.name,
        layout=s.layout,
        num_layers=s.num_layers,
        layers_per_region=s.layers_per_region,
        dtype=_dtype_name(s.dtype),
        batch=getattr(s, "batch", 1),
        pool_bytes=_total_pool_bytes(s),
        chunk_size=s.chunk_size,
        denoise_steps=s.denoise_steps,
        dynamic=bool(s.dynamic),
        functionalization=str(s.functionalization),
        expect_clean=expect_clean,
        surviving_clones=len(report.clones),
        clone_nodes=len(executed_clones(report)),
        other_clones=len(getattr(report, "other_clones", [])),
        clone_bytes_per_step=clone_step,
        ideal_bytes_per_step=ideal_step,
        traffic_ratio=ratio,
        clone_bytes_per_chunk=clone_chunk,
        ideal_bytes_per_chunk=ideal_chunk,
        video_chunks=video_chunks,
        clone_bytes_per_video=clone_video,
        ideal_bytes_per_video=ideal_video,
        video_traffic_ratio=traffic_ratio(ideal_video, clone_video),
        ideal_video_method=method,
        kernel_bytes_per_step=per_unit(kernel_bytes_per_run(report), result.num_steps),
        num_steps=result.num_steps,
        num_chunks=result.num_chunks,
        compile_seconds=float(result.compile_seconds),
        wall_seconds=float(result.wall_seconds),
        verdict=verdict(s.name, expect_clean, len(report.clones), clone_step, ratio, len(executed_clones(report))),
    )


COLUMNS: tuple[str, ...] = tuple(TrafficRow.__dataclass_fields__)


def traffic_table(rows: Iterable[TrafficRow]) -> pd.DataFrame:
    """One row per scenario, raw numbers (what traffic.csv holds)."""
    return pd.DataFrame([r.to_dict() for r in rows], columns=list(COLUMNS))


# Columns shown in the Markdown table, with byte columns rendered for humans.
_DISPLAY: Mapping[str, str] = {
    "scenario": "scenario",
    "layout": "layout",
    "num_layers": "layers",
    "dtype": "dtype",
    "pool_bytes": "pool (K+V, all layers)",
    "functionalization": "func.",
    "surviving_clones": "clones",
    "clone_nodes": "copies",
    "clone_bytes_per_step": "clone B/step",
    "ideal_bytes_per_step": "ideal B/step",
    "traffic_ratio": "ratio",
    "clone_bytes_per_chunk": "clone B/chunk",
    "ideal_bytes_per_chunk": "ideal B/chunk",
    "clone_bytes_per_video": "clone B/video",
    "ideal_bytes_per_video": "ideal B/video",
    "video_traffic_ratio": "video ratio",
    "kernel_bytes_per_step": "kernel B/step",
}
_BYTE_COLUMNS = {c for c in _DISPLAY if "bytes" in c}


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The human table: selected columns, sizes in KiB/MiB/GiB, ratio to one decimal."""
    out = df[list(_DISPLAY)].copy()
    for col in _BYTE_COLUMNS:
        out[col] = out[col].map(format_bytes)
    for col in ("traffic_ratio", "video_traffic_ratio"):
        out[col] = out[col].map(lambda r: f"{r:.2f}x")
    return out.rename(columns=dict(_DISPLAY))


def markdown_report(df: pd.DataFrame, video_chunks: int) -> str:
    """traffic.md: the table, how to read it, and one verdict line per scenario."""
    lines = [
        "# KV-pool traffic per denoising step",
        "",
        "Bytes are memory traffic (a clone reads and writes its bytes: 2 x its size). "
        "Per step and per chunk = averaged over all denoising steps / chunks of the run (commit steps, "
        "which write the chunk's K/V, and plain steps); ideal = resident-window K/V read every step + "
        "the chunk's K/V write on its commit step, independent of the pool size. "
        f"Per video = {video_chunks} chunks: clones x {video_chunks}; ideal from the window model "
        "(window fills, then stays full; checked against the run's own ideal bytes). "
        "ratio = (ideal + clone) / ideal. clones = clone entries the analysis reports (one per pool "
        "hit); copies = distinct clone nodes that run (what the bytes count). kernel B/step = "
        "Inductor's num_bytes_accessed of the compiled kernels, weighted by region calls: a "
        "cross-check that moves with the clones, not a traffic measurement (it counts mutated and "
        "gathered buffers whole).",
        "",
        display_table(df).to_markdown(index=False),
        "",
        "All columns (layers per region, chunk size, steps per chunk, dynamic, raw bytes, timings) "
        "are in traffic.csv.",
        "",
        "## Verdicts",
        "",
    ]
    lines += [f"- {v}" for v in df["verdict"]]
    return "\n".join(lines) + "\n"
