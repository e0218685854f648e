"""The traffic plot: bytes per step (ideal vs actual) against pool size, one line pair per layout.

Actual = ideal + clone bytes. A layout whose clones survive climbs with the pool
while its ideal stays flat; a clean layout's two lines coincide. With benchmark
data (``reports.bench`` CSV) a second panel shows measured time per step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402
import pandas as pd  # noqa: E402

from reports.traffic import MIB  # noqa: E402


def _size_ticks(ax, pool_bytes: pd.Series) -> None:  # type: ignore[no-untyped-def]
    """Ticks at the measured pool sizes, labelled in MiB (not 2^k)."""
    sizes = sorted(set((pool_bytes / MIB).tolist()))
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{s:g}" for s in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _style_pool_axis(ax: Any, pool_bytes: pd.Series, ylabel: str, title: str) -> None:
    """Log-log axes against pool size (MiB), shared by the traffic and the timing panel."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _size_ticks(ax, pool_bytes)
    ax.set_xlabel("KV pool size, all layers K+V (MiB)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)

def plot_traffic(df: pd.DataFrame, path: str | Path, bench: pd.DataFrame | None = None) -> Path:
    """Write the PNG; returns its path."""
    panels = 2 if bench is not None and not bench.empty else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
    ax = axes[0][0]
    # one line pair per model variant: the same layout under v1/v2 or another dtype is another line
    keys = df["layout"] + " " + df["functionalization"] + " " + df["dtype"]
    for layout, group in df.groupby(keys, sort=True):
        g = group.drop_duplicates("pool_bytes").sort_values("pool_bytes")
        x = g["pool_bytes"] / MIB
        actual = (g["ideal_bytes_per_step"] + g["clone_bytes_per_step"]) / MIB
        (line,) = ax.plot(x, actual, marker="o", label=f"{layout}: actual (ideal + clones)")
        ax.plot(x, g["ideal_bytes_per_step"] / MIB, marker="x", linestyle="--", color=line.get_color(),
                label=f"{layout}: ideal")
    _style_pool_axis(ax, df["pool_bytes"], "memory traffic per denoising step (MiB, run average)",
                     "KV traffic per step vs pool size")
    if panels == 2:
        bx = axes[0][1]
        for device, group in bench.groupby("device", sort=True):
            g = group.sort_values("pool_bytes")
            bx.plot(g["pool_bytes"] / MIB, g["split_median_ms"], marker="o", label=f"{device} split")
            bx.plot(g["pool_bytes"] / MIB, g["fused_median_ms"], marker="s", label=f"{device} fused")
        _style_pool_axis(bx, bench["pool_bytes"], "median time per commit step (ms)", "measured (reports.bench)")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
