"""``python -m reports.bench``: wall time of a compiled commit step, split vs fused pools, vs pool size.

Why: the traffic report counts the bytes a surviving pool clone copies; this
measures what it costs. The timed step is a denoising *commit* step built from
``ar_paging`` directly (per layer: gather the resident window, attend, then
``paged_write`` the chunk's K/V), compiled with Inductor once per layout and pool
size. Its ideal traffic depends on the window and the chunk only, never on the
pool, so a time that grows with the pool is the clone.

Method: per pool size, both layouts are compiled, warmed up, then timed in
interleaved rounds (split, fused, fused, split, ...) so machine noise hits both
alike; the reported ratio is the median of the per-round fused/split ratios.
Each sample times enough back-to-back steps to last ~20 ms. Pools are freed
between sizes. CUDA runs when ``torch.cuda.is_available()``; otherwise it is
skipped with a printed reason.

Not a test: run it by hand (see the docs, "Performance"); ``bench.json`` (command, machine, rows)
is what the docs' performance page is generated from.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
import torch._inductor.config as inductor_config
from torch._inductor import metrics
from tqdm import tqdm

from ar_paging import gather_window, pool_write_chunk
from compile_checks.check.kernel_metrics import kernel_byte_metrics
from compile_checks.reports.plot import _size_ticks
from compile_checks.reports.traffic import MIB, format_bytes
from reports.bench_hotpath import TABLES, machine_facts
from reports.cli_args import out_dir

DEFAULT_SIZES_MIB: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class BenchGeometry:
    """A small transformer's KV geometry; pool size is set through ``num_blocks``."""

    num_layers: int = 2
    block_size: int = 16
    num_kv_heads: int = 8
    head_dim: int = 128
    chunk_size: int = 16
    window_chunks: int = 2
    sink_chunks: int = 1
    dtype: torch.dtype = torch.float32

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def token_bytes(self) -> int:
        """One token's K (or V) in one layer."""
        return self.num_kv_heads * self.head_dim * self.itemsize

    def total_pool_bytes(self, num_blocks: int) -> int:
        return 2 * self.num_layers * num_blocks * self.block_size * self.token_bytes

    def blocks_for(self, total_bytes: int) -> int:
        per_block = 2 * self.num_layers * self.block_size * self.token_bytes
        return max(1, total_bytes // per_block)

    @property
    def resident_tokens(self) -> int:
        return (self.sink_chunks + self.window_chunks) * self.chunk_size

    @property
    def ideal_commit_step_bytes(self) -> int:
        """Window K/V read + chunk K/V write, all layers: independent of the pool size."""
        return 2 * self.num_layers * (self.resident_tokens + self.chunk_size) * self.token_bytes


def _commit_step(
    k_pools: list[torch.Tensor],
    v_pools: list[torch.Tensor],
    x: torch.Tensor,
    window_slots: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> torch.Tensor:
    """One commit step: per layer, attend over the resident window, then commit the chunk's K/V."""
    scale = x.shape[-1] ** -0.5
    for k_pool, v_pool in zip(k_pools, v_pools):
        k, v = gather_window(k_pool, v_pool, window_slots)
        scores = torch.einsum("thd,shd->hts", x, k) * scale
        out = torch.einsum("hts,shd->thd", scores.softmax(dim=-1), v)
        pool_write_chunk(k_pool, v_pool, (x + out).unsqueeze(0), (x - out).unsqueeze(0), slot_mapping)
        x = out
    return x


# Two code objects, so Dynamo keeps one compiled entry per layout (its guards do not
# tell a split pool from a fused one of the same shapes and strides).
def _split_step(k_pools, v_pools, x, window_slots, slot_mapping):  # type: ignore[no-untyped-def]
    return _commit_step(k_pools, v_pools, x, window_slots, slot_mapping)


def _fused_step(k_pools, v_pools, x, window_slots, slot_mapping):  # type: ignore[no-untyped-def]
    return _commit_step(k_pools, v_pools, x, window_slots, slot_mapping)


def make_pools(
    layout: str, g: BenchGeometry, num_blocks: int, device: torch.device
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Flat K/V views per layer: two allocations (split) or two halves of one ``(2, ...)`` tensor (fused)."""
    flat = (num_blocks * g.block_size, g.num_kv_heads, g.head_dim)
    ks: list[torch.Tensor] = []
    vs: list[torch.Tensor] = []
    for _ in range(g.num_layers):
        if layout == "split":
            ks.append(torch.zeros(flat, dtype=g.dtype, device=device))
            vs.append(torch.zeros(flat, dtype=g.dtype, device=device))
        elif layout == "fused":
            kv = torch.zeros((2, *flat), dtype=g.dtype, device=device)
            ks.append(kv[0])
            vs.append(kv[1])
        else:
            raise ValueError(f"layout must be 'split' or 'fused', got {layout!r}")
    return ks, vs


@dataclass(frozen=True)
class BenchRow:
    device: str
    pool_bytes: int
    num_blocks: int
    split_median_ms: float
    fused_median_ms: float
    fused_over_split: float  # median of per-round ratios
    gap_ms: float  # fused - split medians
    ideal_bytes_per_step: int
    split_kernel_bytes: int  # Inductor's num_bytes_accessed of the compiled step
    fused_kernel_bytes: int
    rounds: int
    split_steps_per_sample: int
    fused_steps_per_sample: int
    threads: int
    compile_seconds: float


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_calls(fn: Callable[[], object], n: int, device: torch.device) -> float:
    """Seconds per call, averaged over ``n`` back-to-back calls."""
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / n


def _compile(step: Callable[..., torch.Tensor], args: tuple) -> tuple[Callable[[], object], int, float]:
    """Compile + first call; returns the call, Inductor's kernel bytes for it, compile seconds."""
    compiled = torch.compile(step, fullgraph=True, dynamic=False)
    metrics.reset()
    t0 = time.perf_counter()
    with kernel_byte_metrics():
        compiled(*args)
    seconds = time.perf_counter() - t0
    return (lambda: compiled(*args)), int(metrics.num_bytes_accessed), seconds


def bench_size(
    g: BenchGeometry, total_bytes: int, device: torch.device, rounds: int, warmup: int, target_sample_s: float
) -> BenchRow:
    """Time split and fused commit steps at one pool size, interleaved."""
    num_blocks = g.blocks_for(total_bytes)
    resident_blocks = g.resident_tokens // g.block_size
    if num_blocks < resident_blocks + g.chunk_size // g.block_size:
        raise ValueError(f"pool of {num_blocks} blocks is smaller than the window + chunk")
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(g.chunk_size, g.num_kv_heads, g.head_dim, generator=gen, dtype=g.dtype).to(device)
    window_slots = torch.arange(g.resident_tokens, dtype=torch.long, device=device)
    slot_mapping = torch.arange(
        g.resident_tokens, g.resident_tokens + g.chunk_size, dtype=torch.long, device=device
    ).unsqueeze(0)
    calls: dict[str, Callable[[], object]] = {}
    kernel_bytes: dict[str, int] = {}
    compile_s = 0.0
    for layout, step in (("split", _split_step), ("fused", _fused_step)):
        ks, vs = make_pools(layout, g, num_blocks, device)
        calls[layout], kernel_bytes[layout], s = _compile(step, (ks, vs, x, window_slots, slot_mapping))
        compile_s += s
    for layout in calls:
        for _ in range(warmup):
            calls[layout]()
    # Steps per sample, per layout: each sample lasts ~target_sample_s, well above timer and scheduler noise.
    n = {
        layout: max(1, min(1000, int(target_sample_s / max(min(_time_calls(call, 1, device) for _ in range(3)), 1e-6))))
        for layout, call in calls.items()
    }
    samples: dict[str, list[float]] = {"split": [], "fused": []}
    ratios: list[float] = []
    for r in range(rounds):
        order = ("split", "fused") if r % 2 == 0 else ("fused", "split")
        got = {layout: _time_calls(calls[layout], n[layout], device) for layout in order}
        for layout, t in got.items():
            samples[layout].append(t)
        ratios.append(got["fused"] / got["split"])
    split_ms = statistics.median(samples["split"]) * 1e3
    fused_ms = statistics.median(samples["fused"]) * 1e3
    calls.clear()
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return BenchRow(
        device=device.type,
        pool_bytes=g.total_pool_bytes(num_blocks),
        num_blocks=num_blocks,
        split_median_ms=split_ms,
        fused_median_ms=fused_ms,
        fused_over_split=statistics.median(ratios),
        gap_ms=fused_ms - split_ms,
        ideal_bytes_per_step=g.ideal_commit_step_bytes,
        split_kernel_bytes=kernel_bytes["split"],
        fused_kernel_bytes=kernel_bytes["fused"],
        rounds=rounds,
        split_steps_per_sample=n["split"],
        fused_steps_per_sample=n["fused"],
        threads=torch.get_num_threads(),
        compile_seconds=compile_s,
    )


def bench_markdown(df, g: BenchGeometry, command: str) -> str:  # type: ignore[no-untyped-def]
    """bench.md: the geometry, the command, and the table with sizes for humans."""
    show = df.copy()
    for col in ("pool_bytes", "ideal_bytes_per_step", "split_kernel_bytes", "fused_kernel_bytes"):
        show[col] = show[col].map(format_bytes)
    for col in ("split_median_ms", "fused_median_ms", "gap_ms"):
        show[col] = show[col].map(lambda v: f"{v:.3f}")
    show["fused_over_split"] = show["fused_over_split"].map(lambda v: f"{v:.2f}x")
    show = show[
        [
            "device",
            "pool_bytes",
            "split_median_ms",
            "fused_median_ms",
            "fused_over_split",
            "gap_ms",
            "ideal_bytes_per_step",
            "split_kernel_bytes",
            "fused_kernel_bytes",
            "rounds",
            "split_steps_per_sample",
            "fused_steps_per_sample",
            "threads",
        ]
    ]
    show.columns = [
        "device",
        "pool (K+V, all layers)",
        "split ms/step",
        "fused ms/step",
        "fused/split",
        "gap ms",
        "ideal B/step",
        "split kernel B/step (Inductor estimate)",
        "fused kernel B/step (Inductor estimate)",
        "rounds",
        "split steps/sample",
        "fused steps/sample",
        "threads",
    ]
    head = (
        f"# Compiled commit step: split vs fused KV pools\n\n`{command}`\n\n"
        f"Geometry: {g.num_layers} layers, block {g.block_size}, {g.num_kv_heads} KV heads x {g.head_dim}, "
        f"{str(g.dtype).removeprefix('torch.')}, chunk {g.chunk_size} tokens, resident window "
        f"{g.resident_tokens} tokens (sink {g.sink_chunks} + window {g.window_chunks} chunks). "
        "Medians of interleaved rounds after warm-up; fused/split = median of per-round ratios. "
        "kernel B/step = Inductor's num_bytes_accessed for the compiled step: its estimate, not a measurement.\n\n"
    )
    return head + show.to_markdown(index=False) + "\n"


def plot_bench(df, path: Path) -> None:  # type: ignore[no-untyped-def]
    """Time per step (left) and bytes per step (right) against pool size."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.5))
    for device, g in df.groupby("device"):
        g = g.sort_values("pool_bytes")
        x = g["pool_bytes"] / MIB
        ax.plot(x, g["split_median_ms"], marker="o", label=f"{device} split")
        ax.plot(x, g["fused_median_ms"], marker="s", label=f"{device} fused")
        bx.plot(x, g["ideal_bytes_per_step"] / MIB, marker="x", linestyle="--", label=f"{device} ideal")
        bx.plot(x, g["split_kernel_bytes"] / MIB, marker="o", label=f"{device} split (Inductor kernels)")
        bx.plot(x, g["fused_kernel_bytes"] / MIB, marker="s", label=f"{device} fused (Inductor kernels)")
    for a, ylabel, title in (
        (ax, "median ms per commit step", "time per compiled commit step"),
        (bx, "MiB per commit step", "traffic per commit step"),
    ):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        _size_ticks(a, df["pool_bytes"])
        a.set_xlabel("KV pool size, all layers K+V (MiB)")
        a.set_ylabel(ylabel)
        a.set_title(title)
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reports.bench", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="output directory (created if missing)")
    p.add_argument(
        "--sizes-mib",
        type=int,
        nargs="+",
        default=list(DEFAULT_SIZES_MIB),
        help="total pool sizes (all layers, K+V) in MiB",
    )
    p.add_argument("--rounds", type=int, default=11, help="interleaved timing rounds per size")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per layout after compiling")
    p.add_argument("--sample-ms", type=float, default=20.0, help="target length of one timing sample")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: steadier on a shared machine; the clone is a memory copy)",
    )
    p.add_argument("--cpu-only", action="store_true", help="skip CUDA even when available")
    p.add_argument(
        "--hotpath",
        choices=("on", "off", "only"),
        default="on",
        help="also run the ar_paging hot-path tables (reports.bench_hotpath): eager op vs bare "
        "index_copy_, op registration cost, compiled step vs native index_copy_, resident_window; "
        "'only' skips the clone-size sweep",
    )
    return p


def _hotpath_tables(out: Path) -> str:
    """Run every reports.bench_hotpath table; write bench_hotpath.{csv,md}; return the Markdown."""
    torch.set_num_threads(1)
    frames, parts = [], ["# ar_paging hot path (1 thread, interleaved medians)"]
    for name, table in TABLES.items():
        df = table()
        frames.append(df.assign(table=name))
        parts.append(f"\n## {name}\n\n{df.to_markdown(index=False)}")
    pd.concat(frames, ignore_index=True).to_csv(out / "bench_hotpath.csv", index=False)
    md = "\n".join(parts) + "\n"
    (out / "bench_hotpath.md").write_text(md)
    return md


def write_results(out: Path, df: pd.DataFrame, command: str) -> Path:
    """bench.json: the command, the machine and the rows; the docs' performance page is generated from it."""
    path = out / "bench.json"
    doc = {"command": command, "machine": machine_facts(), "rows": df.to_dict(orient="records")}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # usage errors (exit 2) before the run
    if args.rounds < 1 or args.warmup < 0 or any(s < 1 for s in args.sizes_mib):
        print("reports.bench: error: --rounds >= 1, --warmup >= 0, sizes >= 1 MiB", file=sys.stderr)
        return 2
    out_dir(_parser(), args.out)
    # A cached FX graph would skip codegen and leave the kernel byte counts at zero.
    inductor_config.force_disable_caches = True
    torch.set_num_threads(max(1, args.threads))
    devices = [torch.device("cpu")]
    if args.cpu_only:
        print("reports.bench: CUDA skipped (--cpu-only)")
    elif torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    else:
        print(f"reports.bench: CUDA skipped: torch.cuda.is_available() is False (torch {torch.__version__})")
    if args.hotpath != "off":
        hotpath_md = _hotpath_tables(args.out)
        if args.hotpath == "only":
            print(hotpath_md)
            return 0
    g = BenchGeometry()
    command = "python -m reports.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    rows: list[BenchRow] = []
    started = time.perf_counter()
    jobs = [(d, s) for d in devices for s in args.sizes_mib]
    for device, size in tqdm(jobs, desc="bench", unit="size", file=sys.stderr):
        try:
            row = bench_size(g, size * MIB, device, args.rounds, args.warmup, args.sample_ms / 1e3)
        except (RuntimeError, ValueError, MemoryError) as e:  # a clear line, not a bare traceback
            print(f"reports.bench: error at {size} MiB on {device.type}: {type(e).__name__}: {e}", file=sys.stderr)
            return 4
        rows.append(row)
        tqdm.write(
            f"{device.type} {size:>5} MiB: split {row.split_median_ms:8.3f} ms  fused "
            f"{row.fused_median_ms:8.3f} ms  fused/split {row.fused_over_split:6.2f}x",
            file=sys.stderr,
        )
    df = pd.DataFrame([asdict(r) for r in rows])
    df.to_csv(args.out / "bench.csv", index=False)
    md = bench_markdown(df, g, command.strip())
    (args.out / "bench.md").write_text(md)
    write_results(args.out, df, command.strip())
    plot_bench(df, args.out / "bench.png")
    print(md)
    print(
        f"reports.bench: {len(rows)} sizes in {time.perf_counter() - started:.0f} s; "
        f"wrote {args.out}/bench.{{csv,md,json,png}}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
