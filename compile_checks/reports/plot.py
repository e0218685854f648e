"""The traffic plot: bytes per step (ideal and extra), for any set of cases.

A variant checked at several pool sizes (the built-in pool-size variants) gets a line pair against
pool size: ideal + extra (computed from the graph: clone + copy-back, not measured) climbs with the
pool where copies survive while the ideal stays flat; a clean layout's two lines coincide. Every
case checked at one pool size (a user's cases, usually) gets a bar, ideal and extra stacked, one per
case and pipeline. Measured time per step (``--measure``) and benchmark data (``reports.bench`` CSV)
get a panel each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from compile_checks.errors import CompileChecksError
from compile_checks.reports.traffic import MIB, format_bytes

# binary units, largest first: an axis is labelled in the largest that its biggest value reaches
_UNITS: tuple[tuple[str, int], ...] = (("GiB", 1024**3), ("MiB", MIB), ("KiB", 1024), ("B", 1))


def byte_unit(values: Any) -> tuple[str, int]:
    """The unit an axis of ``values`` (bytes) reads best in: ``("KiB", 1024)`` for a 5 KiB top, not 0.005 MiB."""
    array = np.asarray(values, dtype=float)
    finite = array[np.isfinite(array)]
    top = float(np.max(np.abs(finite), initial=0.0))
    return next(((name, size) for name, size in _UNITS if top >= size), ("B", 1))


def _size_ticks(ax, pool_bytes: pd.Series, size: int) -> None:  # type: ignore[no-untyped-def]
    """Ticks at the measured pool sizes, labelled in the axis' unit (not 2^k)."""
    sizes = sorted(set((pool_bytes / size).tolist()))
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{s:g}" for s in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _has_positive(values: Any) -> bool:
    """A log axis needs one finite value > 0: matplotlib raises on drawing one that has none."""
    return bool(np.any(np.isfinite(values) & (np.asarray(values, dtype=float) > 0)))


def _style_pool_axis(ax: Any, pool_bytes: pd.Series, ylabel: str, title: str) -> None:
    """Log-log axes against pool size (in :func:`byte_unit` of the sizes: what :func:`_pool_x` plotted), shared
    by the traffic and the timing panel; an axis with nothing positive to show (every ideal not derivable and
    nothing extra, a case without pools) stays linear."""
    unit, size = byte_unit(pool_bytes)
    ys = np.concatenate([np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()] or [np.zeros(0)])
    if _has_positive(pool_bytes.to_numpy(dtype=float)):
        ax.set_xscale("log", base=2)
    if _has_positive(ys):
        ax.set_yscale("log")
    _size_ticks(ax, pool_bytes, size)
    ax.set_xlabel(f"KV pool size, all layers K+V ({unit})")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _variant_keys(df: pd.DataFrame) -> pd.Series:
    """One line pair per model variant: the same layout under v1/v2, another dtype or another pipeline
    is another line; a user's case (no layout) is its own, by its label (``name[pipeline]``)."""
    layout = df["layout"].fillna("")
    built = layout + " " + df["functionalization"].astype(str) + " " + df["dtype"].astype(str)
    built = built.where(df["pipeline"].astype(str) == "stock", built + " [" + df["pipeline"].astype(str) + "]")
    return built.where(layout != "", df["case"])


def _pool_x(pool_bytes: pd.Series, every: pd.Series) -> pd.Series:
    """Pool sizes in the unit the axis of ``every`` size on it is labelled in."""
    return pool_bytes / byte_unit(every)[1]


def _lines(ax: Any, df: pd.DataFrame, keys: pd.Series) -> None:
    unit, size = byte_unit(df["ideal_bytes_per_step"].fillna(0.0) + df["extra_bytes_per_step"].fillna(0.0))
    for variant, group in df.groupby(keys, sort=True):
        g = group.drop_duplicates("pool_bytes").sort_values("pool_bytes")
        x = _pool_x(g["pool_bytes"], df["pool_bytes"])
        total = (g["ideal_bytes_per_step"] + g["extra_bytes_per_step"]) / size
        (line,) = ax.plot(x, total, marker="o", label=f"{variant}: ideal + extra (clone + copy-back)")
        ax.plot(
            x,
            g["ideal_bytes_per_step"] / size,
            marker="x",
            linestyle="--",
            color=line.get_color(),
            label=f"{variant}: ideal",
        )
    _style_pool_axis(
        ax,
        df["pool_bytes"],
        f"memory traffic per step ({unit}, run average, from the graph)",
        "KV traffic per step vs pool size",
    )


def _bars(ax: Any, df: pd.DataFrame) -> None:
    """One bar per case (and pipeline): the ideal, the extra stacked on it; an ideal not known is left out."""
    labels = [f"{c}\n{format_bytes(p)} pool" for c, p in zip(df["case"], df["pool_bytes"])]
    unit, size = byte_unit(df["ideal_bytes_per_step"].fillna(0.0) + df["extra_bytes_per_step"].fillna(0.0))
    ideal = (df["ideal_bytes_per_step"].fillna(0.0) / size).to_numpy(dtype=float)
    extra = (df["extra_bytes_per_step"].fillna(0.0) / size).to_numpy(dtype=float)
    x = np.arange(len(df))
    ax.bar(x, ideal, label="ideal", color="#3b6ea5")
    ax.bar(x, extra, bottom=ideal, label="extra (clone + copy-back)", color="#b00020")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30 if len(df) > 4 else 0, ha="right" if len(df) > 4 else "center", fontsize=7)
    ax.set_ylabel(f"memory traffic per step ({unit}, run average, from the graph)")
    top = float(np.max(ideal + extra, initial=0.0))
    if top > 0:
        ax.set_ylim(0, top * 1.3)  # room for the legend above the tallest bar
    ax.set_title("KV traffic per step, per case")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=2)


def traffic_panels(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows drawn as lines against pool size, rows drawn as bars): a variant with several pool sizes
    is a line pair, every other row a bar."""
    keys = _variant_keys(df)
    sizes = df.groupby(keys)["pool_bytes"].transform("nunique")
    return df[sizes > 1], df[sizes <= 1]


def plot_traffic(df: pd.DataFrame, path: str | Path, bench: pd.DataFrame | None = None) -> Path:
    """Write the PNG; returns its path."""
    measured = df[df["ms_per_step"].notna()] if "ms_per_step" in df else df.iloc[0:0]
    has_bench = bench is not None and not bench.empty
    lines, bars = traffic_panels(df)
    panels = (not lines.empty) + (not bars.empty) + (not measured.empty) + has_bench
    fig, axes = plt.subplots(1, max(1, panels), figsize=(6.5 * max(1, panels), 4.5), squeeze=False)
    at = iter(axes[0])
    if not lines.empty:
        _lines(next(at), lines, _variant_keys(lines))
    if not bars.empty:
        _bars(next(at), bars)
    if not measured.empty:
        mx = next(at)
        keys = _variant_keys(df)
        for variant, group in measured.groupby(keys[measured.index], sort=True):
            g = group.drop_duplicates("pool_bytes").sort_values("pool_bytes")
            mx.plot(_pool_x(g["pool_bytes"], measured["pool_bytes"]), g["ms_per_step"], marker="o", label=variant)
        _style_pool_axis(mx, measured["pool_bytes"], "measured ms per step (median)", "measured (--measure)")
    if bench is not None and has_bench:
        bx = next(at)
        for device, group in bench.groupby("device", sort=True):
            g = group.sort_values("pool_bytes")
            x = _pool_x(g["pool_bytes"], bench["pool_bytes"])
            bx.plot(x, g["split_median_ms"], marker="o", label=f"{device} split")
            bx.plot(x, g["fused_median_ms"], marker="s", label=f"{device} fused")
        _style_pool_axis(bx, bench["pool_bytes"], "median time per commit step (ms)", "measured (reports.bench)")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


BENCH_COLUMNS: tuple[str, ...] = ("device", "pool_bytes", "split_median_ms", "fused_median_ms")


class BenchCsvError(CompileChecksError, ValueError):
    """The ``--bench`` CSV is not a ``reports.bench`` table (checked before any compile)."""


def load_bench_csv(path: str | Path) -> pd.DataFrame:
    """A ``reports.bench`` CSV with the columns the timing panel plots, numeric and positive."""
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:  # pandas' EmptyDataError / ParserError are ValueErrors
        raise BenchCsvError(f"cannot read bench CSV {path}: {e}") from e
    missing = [c for c in BENCH_COLUMNS if c not in df.columns]
    if missing:
        raise BenchCsvError(
            f"bench CSV {path} lacks column(s) {', '.join(missing)} "
            f"(has {', '.join(map(str, df.columns))}); write it with python -m reports.bench"
        )
    if df.empty:
        raise BenchCsvError(f"bench CSV {path} has no rows")
    for col in BENCH_COLUMNS[1:]:
        values = pd.to_numeric(df[col], errors="coerce")
        if values.isna().any() or (values <= 0).any():
            raise BenchCsvError(f"bench CSV {path}: column {col} must hold positive numbers, got {df[col].tolist()!r}")
        df[col] = values
    return df
