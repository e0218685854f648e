"""traffic.html: a self-contained page a lead reads in 30 seconds.

A short "what this means" header, one row per case with its verdict coloured by
status, sizes in KiB/MiB/GiB, and the plot embedded as a base64 PNG (the page is
one file: it can be attached to a CI run). Every cell is HTML-escaped. Each row
carries ``data-case`` and ``data-status`` so tools (and the tests) read it back.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import pandas as pd

from compile_checks.reports.traffic import format_bytes

STATUS_COLOURS: dict[str, str] = {
    "clean": "#1b7f3b",
    "expected clones": "#8a5a00",
    "REGRESSION": "#b00020",
    "UNEXPECTEDLY CLEAN": "#b00020",
    "FAILED": "#b00020",
    "ERROR": "#b00020",
}

# (column, heading, kind): kind "bytes" -> human size, "ratio" -> 1.23x, "ms" -> 0.123, else as is
PAGE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("case", "case", "text"),
    ("pipeline", "pipeline", "text"),
    ("pool_bytes", "pool", "bytes"),
    ("surviving_clones", "clones", "text"),
    ("extra_bytes_per_step", "extra / step", "bytes"),
    ("ideal_bytes_per_step", "ideal / step", "bytes"),
    ("traffic_ratio", "(ideal + extra) / ideal", "ratio"),
    ("extra_bytes_per_video", "extra / video", "bytes"),
    ("ms_per_step", "measured ms / step", "ms"),
    ("status", "verdict", "status"),
)

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} .lead{background:#f5f7fa;border-left:4px solid #3b6ea5;padding:.6em 1em}
table{border-collapse:collapse;width:100%;margin:1em 0} th,td{padding:.35em .6em;border-bottom:1px solid #ddd}
th{background:#eef1f5;text-align:left} td.num{text-align:right;font-variant-numeric:tabular-nums}
.status{font-weight:600;color:#fff;border-radius:3px;padding:.1em .5em;white-space:nowrap}
.verdicts li{margin:.2em 0} img{max-width:100%;border:1px solid #ddd} .muted{color:#666;font-size:.9em}
"""


def _cell(value: object, kind: str) -> str:
    if kind == "status":
        status = str(value)
        colour = STATUS_COLOURS.get(status, "#555")
        return f'<td><span class="status" style="background:{colour}">{html.escape(status)}</span></td>'
    if isinstance(value, float) and math.isnan(value):
        return '<td class="num">n/a</td>'
    if kind == "bytes":
        return f'<td class="num">{html.escape(format_bytes(float(value)))}</td>'  # type: ignore[arg-type]
    if kind == "ratio":
        return f'<td class="num">{float(value):.2f}x</td>'  # type: ignore[arg-type]
    if kind == "ms":
        return f'<td class="num">{float(value):.3f}</td>'  # type: ignore[arg-type]
    return f"<td>{html.escape(str(value))}</td>"


def _summary(df: pd.DataFrame) -> str:
    bad = df[df["status"].isin(["REGRESSION", "UNEXPECTEDLY CLEAN", "FAILED", "ERROR"])]
    if bad.empty:
        return f"All {len(df)} case(s) met their expectation."
    return f"<strong>{len(bad)} of {len(df)} case(s) did not meet their expectation:</strong> " + ", ".join(
        html.escape(str(n)) for n in bad["case"]
    )


def html_report(df: pd.DataFrame, video_chunks: int, plot_png: Path | None = None) -> str:
    """The whole page as a string."""
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in PAGE_COLUMNS)
    body = []
    for _, row in df.iterrows():
        cells = "".join(_cell(row[c], kind) for c, _, kind in PAGE_COLUMNS)
        body.append(
            f'<tr data-case="{html.escape(str(row["case"]))}" '
            f'data-status="{html.escape(str(row["status"]))}">{cells}</tr>'
        )
    verdicts = "".join(f"<li>{html.escape(str(v))}</li>" for v in df["verdict"])
    img = ""
    if plot_png is not None and plot_png.is_file():
        data = base64.b64encode(plot_png.read_bytes()).decode("ascii")
        img = f'<h2>Traffic per step</h2><img alt="traffic plot" src="data:image/png;base64,{data}">'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>KV-pool traffic report</title><style>{_CSS}</style></head>
<body>
<h1>KV-pool traffic report</h1>
<div class="lead">
<p><strong>What this means.</strong> A pool copy that survives Inductor's reinplace pass runs on every call
of its compiled region: it copies the pool (clone) and copies the written part back (copy-back), so it costs
bytes that grow with the pool while the ideal traffic (what the step must read and write) does not.
<em>extra / step</em> counts those copies node by node from the final graph; <em>(ideal + extra) / ideal</em>
is how many times more memory traffic the step moves than it must (1.00x = none).
A <span class="status" style="background:{STATUS_COLOURS["clean"]}">clean</span> case keeps no copy;
an <span class="status" style="background:{STATUS_COLOURS["expected clones"]}">expected clones</span> case is a
negative control that must keep its copy (proof the check still sees it); red is a failure.</p>
<p>{_summary(df)}</p>
</div>
<table><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(body)}
</tbody></table>
<p class="muted">Per video = {video_chunks} chunks. Measured ms / step needs <code>--measure</code>
(n/a otherwise). All columns, raw bytes and timings are in traffic.csv; one row per extra copy in
traffic_nodes.csv.</p>
<h2>Verdicts</h2><ul class="verdicts">{verdicts}</ul>
{img}
</body></html>
"""


__all__ = ["PAGE_COLUMNS", "STATUS_COLOURS", "html_report"]
