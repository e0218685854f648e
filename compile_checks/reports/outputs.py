"""The report's files: traffic.csv (every column some case has a value for, raw: ``traffic.tidy_table``),
traffic_nodes.csv (one row per extra copy), traffic.md (essential columns), traffic.png and traffic.html
(the plot embedded)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from compile_checks.reports.traffic import format_bytes, tidy_table

# the essential columns, in the Markdown table, with their headings
MD_COLUMNS: Mapping[str, str] = {
    "case": "case",
    "pipeline": "pipeline",
    "pool_bytes": "pool",
    "surviving_clones": "clones",
    "extra_bytes_per_step": "extra B/step",
    "ideal_bytes_per_step": "ideal B/step",
    "traffic_ratio": "ratio",
    "extra_bytes_per_video": "extra B/video",
    "ms_per_step": "ms/step",
    "status": "verdict",
}
OUTPUT_FILES: tuple[str, ...] = ("traffic.csv", "traffic_nodes.csv", "traffic.md", "traffic.png", "traffic.html")


def _ratio(r: float) -> str:
    return "n/a" if math.isnan(r) else f"{r:.2f}x"


def _ms(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.3f}"


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The human table: essential columns, sizes in KiB/MiB/GiB, ratios to two decimals."""
    columns = dict(MD_COLUMNS)
    if "program_copies" in df.columns and (df["program_copies"].fillna(0) > 0).any():  # the program's own copies
        at = list(columns).index("ideal_bytes_per_step")
        items = list(columns.items())
        columns = dict([*items[:at], ("program_copy_bytes_per_step", "program copies B/step"), *items[at:]])
    out = df[list(columns)].copy()
    for col in ("pool_bytes", "extra_bytes_per_step", "ideal_bytes_per_step", "extra_bytes_per_video"):
        out[col] = out[col].map(format_bytes)
    if "program_copy_bytes_per_step" in out.columns:
        out["program_copy_bytes_per_step"] = out["program_copy_bytes_per_step"].map(format_bytes)
    out["traffic_ratio"] = out["traffic_ratio"].map(_ratio)
    out["ms_per_step"] = out["ms_per_step"].map(_ms)
    return out.rename(columns=columns)


def _program_copies_sentence(df: pd.DataFrame) -> list[str]:
    if "program_copies" not in df.columns or not (df["program_copies"].fillna(0) > 0).any():
        return []
    return [
        "",
        "program copies = the pool-sized buffers the program itself makes from a pool (a roll of a ring cache, "
        "a copy of the window as an attention input: `program_copy`), the bytes they write per step (each is "
        "read at least once too); no reinplacing failure, so not in extra.",
    ]


def markdown_report(df: pd.DataFrame, video_chunks: int) -> str:
    """traffic.md: how to read it, the essential table, one verdict line per case."""
    lines = [
        "# KV-pool traffic per step",
        "",
        "extra = what surviving pool copies move, node by node from the final graph: the clone (read + "
        "write of the copied buffer) and the copy-back into the pool (read + write of the written view), "
        "each once per call of its compiled region, averaged over the run's steps. ideal = what the step "
        "must move (built-in scenarios: resident-window K/V read + the chunk's K/V write; your cases: "
        "Case.ideal_bytes_per_call, else derived from the graph's writes and gathers). "
        "ratio = (ideal + extra) / ideal. "
        f"Per video = {video_chunks} chunks. ms/step is measured with --measure (n/a otherwise).",
        *_program_copies_sentence(df),
        "",
        display_table(df).to_markdown(index=False),
        "",
        "All columns (clone vs copy-back split, per chunk, layout, raw bytes, timings, Inductor's kernel-byte "
        "estimate on full compiles) are in traffic.csv; one row per extra copy in traffic_nodes.csv.",
        "",
        "## Verdicts",
        "",
    ]
    lines += [f"- {v}" for v in df["verdict"]]
    return "\n".join(lines) + "\n"


def write_outputs(df: pd.DataFrame, nodes: pd.DataFrame, out: Path, video_chunks: int, bench_df: Any = None) -> None:
    """Write every file of :data:`OUTPUT_FILES` into ``out``."""
    from compile_checks.reports.html_page import html_report
    from compile_checks.reports.plot import plot_traffic

    tidy_table(df).to_csv(out / "traffic.csv", index=False)
    nodes.to_csv(out / "traffic_nodes.csv", index=False)
    (out / "traffic.md").write_text(markdown_report(df, video_chunks))
    png = plot_traffic(df, out / "traffic.png", bench_df)
    (out / "traffic.html").write_text(html_report(df, video_chunks, png))


__all__ = ["MD_COLUMNS", "OUTPUT_FILES", "display_table", "markdown_report", "write_outputs"]
