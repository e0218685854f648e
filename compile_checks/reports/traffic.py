"""One report row per case: the extra bytes surviving copies move, next to the ideal.

Rows come from a built-in scenario's run (:func:`traffic_row`, a
:class:`compile_checks.reports.run.ScenarioRun`; its ideal is the scenario's window model) or
from a user's ``CaseResult`` (:func:`case_row_and_nodes`; its ideal
is the case's ``ideal_bytes_per_call`` or derived from the compiled graphs, see
:mod:`compile_checks.reports.ideal`). No torch.compile here: the arithmetic is
testable on hand-built findings.

Accounting:

* extra bytes = every surviving copy's clone *and* copy-back, node by node, each
  once per call of its region (:mod:`compile_checks.reports.accounting`); per step /
  per chunk = over the run's steps / chunks. A copy in the commit-step region counts
  once per chunk, not once per step.
* ideal (built-in) = the resident window's K/V read every step + the chunk's K/V write
  on its commit step, averaged over the run; per video from the window model when it
  reproduces the run's own ideal bytes, else the run's per-chunk average x chunks.
* ``ms_per_step`` is measured (``--measure``, :mod:`compile_checks.reports.measure`);
  ``inductor_kernel_bytes_estimate_per_step`` is Inductor's own *estimate* of the bytes
  its kernels touch (full compiles only; it counts mutated and gathered buffers whole).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from compile_checks.check.findings import CloneReport
from compile_checks.reports import accounting as acc

DEFAULT_VIDEO_CHUNKS = 60
MIB = 1 << 20
NAN = float("nan")

# status -> what it means; html_page colours by it. FAILED: the gate's failing findings (a lost write, too many
# recompiles...): the compiled run is not the engine's work, its traffic is not comparable; ERROR: undecided
STATUSES: tuple[str, ...] = ("clean", "expected clones", "REGRESSION", "UNEXPECTEDLY CLEAN", "FAILED", "ERROR")


@dataclass(frozen=True)
class TrafficRow:
    """One case; byte counts are per run-average step unless named otherwise (NaN: not known)."""

    case: str  # the case's label: its name, with ``[pipeline]`` under a pipeline other than stock
    source: str  # "builtin" | "target"
    pipeline: str
    layout: str
    num_layers: float
    layers_per_region: float
    dtype: str
    batch: float
    pool_bytes: int  # all named pools' distinct storage (built-in: all layers, K + V)
    chunk_size: float
    denoise_steps: float
    dynamic: bool
    functionalization: str
    expect_clean: bool
    status: str
    surviving_clones: int
    clone_nodes: int
    other_clones: int  # copies of caller tensors that are not a named pool (not in the bytes)
    extra_bytes_per_step: float
    clone_bytes_per_step: float  # the copy-in alone (what older reports counted)
    copy_back_bytes_per_step: float
    ideal_bytes_per_step: float
    ideal_source: str
    traffic_ratio: float
    extra_bytes_per_chunk: float
    ideal_bytes_per_chunk: float
    video_chunks: int
    extra_bytes_per_video: float
    ideal_bytes_per_video: float
    video_traffic_ratio: float
    ideal_video_method: str
    ms_per_step: float
    inductor_kernel_bytes_estimate_per_step: float
    num_steps: int
    num_chunks: float
    analysis_only: bool
    compile_seconds: float
    wall_seconds: float
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


COLUMNS: tuple[str, ...] = tuple(TrafficRow.__dataclass_fields__)


def per_unit(total: float, units: float) -> float:
    """``total / units``; 0 for a run with no units, NaN when either is unknown."""
    if (isinstance(units, float) and math.isnan(units)) or (isinstance(total, float) and math.isnan(total)):
        return NAN
    return total / units if units > 0 else 0.0


def traffic_ratio(ideal_bytes: float, extra_bytes: float) -> float:
    """(ideal + extra) / ideal: 1.0 means no traffic beyond the ideal."""
    if math.isnan(ideal_bytes) or math.isnan(extra_bytes):
        return NAN
    if ideal_bytes > 0:
        return (ideal_bytes + extra_bytes) / ideal_bytes
    return 1.0 if extra_bytes == 0 else math.inf


def format_bytes(n: float) -> str:
    """Binary-unit size for humans (the CSV keeps raw bytes)."""
    if not math.isfinite(n):
        return "n/a" if math.isnan(n) else str(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def status_of(expect_clean: bool, clones: int, errors: int = 0, failing: int = 0) -> str:
    """``failing``: the run's failing findings (lost writes...); ``errors``: what the check could not decide."""
    if failing:
        return "FAILED"
    if errors:
        return "ERROR"
    if clones == 0:
        return "clean" if expect_clean else "UNEXPECTEDLY CLEAN"
    return "REGRESSION" if expect_clean else "expected clones"


def failing_findings(report: CloneReport) -> list[Any]:
    """The run's findings that fail the case whatever it expects (the gate's: lost writes, too many recompiles...)."""
    return [f for f in report.run_findings if f.fails]


def _failed_verdict(name: str, failing: list[Any]) -> str:
    kinds = ", ".join(sorted({str(f.kind) for f in failing}))
    pools = sorted({str(f.pool) for f in failing if getattr(f, "pool", None)})
    where = f" on pool{'s' if len(pools) > 1 else ''} {', '.join(pools)}" if pools else ""
    return (
        f"{name}: FAILED: {kinds}{where} (the gate's finding, see its output): the compiled run does not do the "
        "engine's work, so its traffic is not comparable and is never taken as the model's ideal"
    )


def verdict(
    name: str,
    status: str,
    clones: int,
    extra_per_step: float,
    ratio: float,
    copies: int | None = None,
    failing: list[Any] | None = None,
) -> str:
    """One line: did the case do what it is there for, and what its copies cost."""
    if status == "FAILED":
        return _failed_verdict(name, failing or [])
    if status == "ERROR":
        return f"{name}: ERROR: the check reported errors (see the gate's output)"
    if clones == 0:
        what = "clean" if status == "clean" else "UNEXPECTEDLY CLEAN (negative control did not reproduce)"
        return f"{name}: {what}: 0 clones, traffic = ideal"
    what = "REGRESSION" if status == "REGRESSION" else "expected clones (negative control)"
    distinct = "" if copies is None or copies == clones else f" ({copies} distinct cop{'ies' if copies != 1 else 'y'})"
    ratio_txt = "" if math.isnan(ratio) else f" = {ratio:.2f}x ideal"
    return (
        f"{name}: {what}: {clones} clone{'s' if clones != 1 else ''}{distinct}, "
        f"{format_bytes(extra_per_step)}/step beyond ideal (clone + copy-back){ratio_txt}"
    )


def _token_bytes(scenario: Any) -> int:
    import torch

    return scenario.num_kv_heads * scenario.head_dim * torch.empty((), dtype=scenario.dtype).element_size()


def _total_pool_bytes(scenario: Any) -> int:
    total = getattr(scenario, "total_pool_bytes", None)
    if total is not None:
        return int(total)
    return 2 * scenario.num_layers * scenario.num_blocks * scenario.block_size * _token_bytes(scenario)


def resident_tokens(chunk_index: int, chunk_size: int, window_chunks: int, sink_chunks: int) -> int:
    """Tokens resident (per sequence) while chunk ``chunk_index`` is denoised (sink + window cap)."""
    return min(chunk_index, sink_chunks + window_chunks) * chunk_size


def ideal_video_bytes(scenario: Any, num_chunks: int) -> int | None:
    """Window model of ``num_chunks`` chunks: every step reads the resident window's K/V, every
    chunk writes its own K/V once (all layers, all sequences). None without a window."""
    window, sink = getattr(scenario, "window_chunks", None), getattr(scenario, "sink_chunks", None)
    if window is None or sink is None:
        return None
    kv_layer_seq = 2 * scenario.num_layers * getattr(scenario, "batch", 1) * _token_bytes(scenario)
    reads = sum(resident_tokens(c, scenario.chunk_size, window, sink) for c in range(num_chunks))
    return kv_layer_seq * (reads * scenario.denoise_steps + num_chunks * scenario.chunk_size)


@dataclass(frozen=True)
class _Run:
    """What every row needs, whatever produced it."""

    name: str
    report: CloneReport
    expect_clean: bool
    num_steps: int
    num_chunks: float
    ideal_run: float
    ideal_source: str
    analysis_only: bool
    compile_seconds: float
    wall_seconds: float


def _row(
    run: _Run, video_chunks: int, fields: Mapping[str, Any], ideal_video: tuple[float, str] | None, ms_per_step: float
) -> tuple[TrafficRow, list[acc.NodeCost]]:
    if video_chunks < 1:
        raise ValueError(f"video_chunks must be >= 1, got {video_chunks}")
    report = run.report
    nodes = acc.node_costs(run.name, report)
    extra_run = acc.bytes_per_run(nodes)
    extra_step = per_unit(extra_run, run.num_steps)
    ideal_step = per_unit(run.ideal_run, run.num_steps)
    extra_chunk = per_unit(extra_run, run.num_chunks)
    ideal_chunk = per_unit(run.ideal_run, run.num_chunks)
    ratio = traffic_ratio(ideal_step, extra_step)
    if ideal_video is None:
        ideal_video = (ideal_chunk * video_chunks, "run average x chunks")
    extra_video = extra_chunk * video_chunks
    copies = len(acc.executed_clones(report))
    failing = failing_findings(report)
    status = status_of(run.expect_clean, len(report.clones), len(report.problems) - len(failing), len(failing))
    kernel = NAN if run.analysis_only else per_unit(acc.kernel_bytes_per_run(report), run.num_steps)
    row = TrafficRow(
        case=run.name,
        expect_clean=run.expect_clean,
        status=status,
        surviving_clones=len(report.clones),
        clone_nodes=copies,
        other_clones=len(getattr(report, "other_clones", [])),
        extra_bytes_per_step=extra_step,
        clone_bytes_per_step=per_unit(acc.clone_only_bytes_per_run(nodes), run.num_steps),
        copy_back_bytes_per_step=per_unit(extra_run - acc.clone_only_bytes_per_run(nodes), run.num_steps),
        ideal_bytes_per_step=ideal_step,
        ideal_source=run.ideal_source,
        traffic_ratio=ratio,
        extra_bytes_per_chunk=extra_chunk,
        ideal_bytes_per_chunk=ideal_chunk,
        video_chunks=video_chunks,
        extra_bytes_per_video=extra_video,
        ideal_bytes_per_video=ideal_video[0],
        video_traffic_ratio=traffic_ratio(ideal_video[0], extra_video),
        ideal_video_method=ideal_video[1],
        ms_per_step=ms_per_step,
        inductor_kernel_bytes_estimate_per_step=kernel,
        num_steps=run.num_steps,
        num_chunks=run.num_chunks,
        analysis_only=run.analysis_only,
        compile_seconds=float(run.compile_seconds),
        wall_seconds=float(run.wall_seconds),
        verdict=verdict(run.name, status, len(report.clones), extra_step, ratio, copies, failing),
        **fields,
    )
    return row, nodes


def traffic_row_and_nodes(
    result: Any, video_chunks: int = DEFAULT_VIDEO_CHUNKS, ms_per_step: float = NAN, analysis_only: bool = True
) -> tuple[TrafficRow, list[acc.NodeCost]]:
    """A built-in scenario's run (``reports.run.ScenarioRun``) as one row, and its per-node extra bytes."""
    s = result.scenario
    pipeline = str(getattr(result, "pipeline", "stock"))
    ideal_run = result.ideal_read_bytes + result.ideal_write_bytes
    modelled = ideal_video_bytes(s, result.num_chunks)
    ideal_video = None
    if modelled is not None and modelled == ideal_run:
        ideal_video = (float(ideal_video_bytes(s, video_chunks)), "window model")  # type: ignore[arg-type]
    run = _Run(
        name=s.name if pipeline == "stock" else f"{s.name}[{pipeline}]",  # the gate's labels (pipeline_label)
        report=result.report,
        expect_clean=bool(getattr(s, "expect_clean", True)),
        num_steps=result.num_steps,
        num_chunks=float(result.num_chunks),
        ideal_run=float(ideal_run),
        ideal_source="scenario model",
        analysis_only=analysis_only,
        compile_seconds=result.compile_seconds,
        wall_seconds=result.wall_seconds,
    )
    fields = dict(
        source="builtin",
        pipeline=pipeline,
        layout=s.layout,
        num_layers=float(s.num_layers),
        layers_per_region=float(s.layers_per_region),
        dtype=str(s.dtype).removeprefix("torch."),
        batch=float(getattr(s, "batch", 1)),
        pool_bytes=_total_pool_bytes(s),
        chunk_size=float(s.chunk_size),
        denoise_steps=float(s.denoise_steps),
        dynamic=bool(s.dynamic),
        functionalization=str(s.functionalization),
    )
    return _row(run, video_chunks, fields, ideal_video, ms_per_step)


def traffic_row(result: Any, video_chunks: int = DEFAULT_VIDEO_CHUNKS, **kw: Any) -> TrafficRow:
    return traffic_row_and_nodes(result, video_chunks, **kw)[0]


def distinct_storage_bytes(pools: Mapping[str, Any]) -> int:
    """Bytes of the distinct storages behind the named pools (two views of one fused tensor count once)."""
    seen: dict[int, int] = {}
    for t in pools.values():
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def case_row_and_nodes(
    result: Any,
    calls: int,
    ideal: tuple[int | None, str],
    video_chunks: int = DEFAULT_VIDEO_CHUNKS,
    ms_per_step: float = NAN,
) -> tuple[TrafficRow, list[acc.NodeCost]]:
    """A user's ``CaseResult`` as one row: a step is one call of the compiled function.

    ``ideal``: (bytes over the run, source) from :func:`compile_checks.reports.ideal.case_ideal_per_run`.
    Chunk and video columns need ``case.meta["steps_per_chunk"]``; NaN without it.
    """
    case = result.case
    per_chunk = case.meta.get("steps_per_chunk") if isinstance(case.meta, Mapping) else None
    num_chunks = calls / int(per_chunk) if per_chunk else NAN
    run = _Run(
        name=case.name,
        report=result.report,
        expect_clean=case.expects_clean,  # under the pipeline it ran (an expect_clean mapping has one per pipeline)
        num_steps=calls,
        num_chunks=num_chunks,
        ideal_run=NAN if ideal[0] is None else float(ideal[0]),
        ideal_source=ideal[1],
        analysis_only=bool(result.analysis_only),
        compile_seconds=result.compile_seconds,
        wall_seconds=result.wall_seconds,
    )
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in case.pools.values()})
    fields = dict(
        source="target",
        pipeline=str(case.pipeline),
        layout="",
        num_layers=NAN,
        layers_per_region=NAN,
        dtype=",".join(dtypes),
        batch=NAN,
        pool_bytes=distinct_storage_bytes(case.pools),
        chunk_size=NAN,
        denoise_steps=float(per_chunk) if per_chunk else NAN,
        dynamic=bool(case.dynamic),
        functionalization=str(case.functionalization or "pipeline default"),
    )
    return _row(run, video_chunks, fields, None, ms_per_step)


def traffic_table(rows: Iterable[TrafficRow]) -> pd.DataFrame:
    """One row per case, raw numbers (what traffic.csv holds)."""
    return pd.DataFrame([r.to_dict() for r in rows], columns=list(COLUMNS))


# counts stored as floats so that NaN can say "not known" (a user's case has no layers or chunk size)
INTEGER_COLUMNS: tuple[str, ...] = (
    "num_layers", "layers_per_region", "batch", "chunk_size", "denoise_steps", "num_chunks",
)  # fmt: skip


def tidy_table(df: pd.DataFrame) -> pd.DataFrame:
    """The table as traffic.csv and :func:`compile_checks.reports.traffic_frame` give it: without the
    columns no row has a value for (a user's cases have no layers, an analysis-only run no kernel
    estimate), and counts as integers (pandas' nullable ``Int64`` where some rows have none)."""
    empty = [c for c in df.columns if (df[c].isna() | (df[c].astype(str) == "")).all()]  # a user's layout is ""
    out = df.drop(columns=empty)
    for col in INTEGER_COLUMNS:
        if col in out.columns:
            values = out[col].dropna()
            if values.map(lambda v: float(v).is_integer()).all():
                out[col] = out[col].astype("Int64")
    return out


def nodes_table(nodes: Iterable[acc.NodeCost]) -> pd.DataFrame:
    """One row per extra copy (traffic_nodes.csv)."""
    return pd.DataFrame([n.to_dict() for n in nodes], columns=list(acc.NodeCost.__dataclass_fields__))
