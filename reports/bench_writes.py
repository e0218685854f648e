"""``python -m reports.bench_writes``: what the write check costs, in memory and in time.

Why: the write check (``Case(check_writes=True)``, the default) runs the case eagerly first (the eager
reference) and watches every compiled graph's opaque op calls (:mod:`compile_checks.check.writes`);
both must cost what the writes cost, not what the pools cost. Two measurements, each point in a fresh
process (one process per point: peak memory is per process, and no point inherits another's caches):

* **memory**: examples/engine's model (the toy causal DiT, ``paged_write`` per layer) with only its
  K/V pools growing (``--sizes-gib``), run three ways: a plain ``torch.compile``, the check with
  ``check_writes=False``, the check with the write check on. The extra peak is measured from a
  baseline taken after the model, the pools and every import are in place: on CPU the process's
  peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``) minus that baseline (RSS, because the tensors are
  not Python objects: ``tracemalloc`` does not see them); on CUDA ``torch.cuda.max_memory_allocated``
  minus what was allocated at the baseline. Reported: each mode's extra, and the check's extra over
  plain compile as a fraction of the pools (target: <= 0.25x at 0.5 GiB).
* **time** (and memory at production size): :mod:`reports.bench_writes_dit`, a DiT stack of ``--blocks``
  blocks (hidden ``--hidden``, ``--tokens`` tokens per chunk, paged K/V pools per block sized for
  ``--pool-chunks`` chunks), dynamo-captured with no Inductor, rolled out plain and under the per-call write
  check in interleaved rounds: ``write_check`` = checked - plain, as a multiple of the plain (eager) rollout
  (target: <= 1.5x), and the checked rollout's extra peak RSS as a fraction of the pools (target: <= 0.25x,
  flat in the pools' size: compare two ``--pool-chunks``). ``--small`` is a CI-fast setting (hidden 128,
  32 tokens).

Results go to ``reports/results/bench_writes.json`` (``--out``) and a table is printed. Not a test:
run it by hand (``--sizes-gib 0.5 --blocks 4 16`` for a quick look). Each process uses one thread.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("plain", "check_writes_off", "check_writes_on")
GIB = 1 << 30


# ---- one point, in its own process -------------------------------------------------------------


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


@contextlib.contextmanager
def _peak(device: Any) -> Iterator[dict[str, int]]:
    """``{"baseline", "peak", "extra"}`` bytes around the block (CUDA allocator or the process's RSS)."""
    import torch

    out: dict[str, int] = {}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        out["baseline"] = torch.cuda.memory_allocated(device)
    else:
        out["baseline"] = _rss_bytes()
    yield out
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        out["peak"] = torch.cuda.max_memory_allocated(device)
    else:
        out["peak"] = _rss_bytes()
    out["extra"] = out["peak"] - out["baseline"]


def memory_point(pool_bytes: int, mode: str, device_name: str, analysis_only: bool) -> dict[str, Any]:
    """Peak memory of one rollout of examples/engine's model with pools of ``pool_bytes`` in all."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "engine"))
    from toy_dit import ToyCausalDiT, ToyDiTConfig, chunk_slots

    from compile_checks import Case
    from compile_checks.case import run_case

    device = torch.device(device_name)
    cfg = ToyDiTConfig()
    pools_n = 2 * cfg.num_layers
    slots = max(cfg.num_slots, pool_bytes // (pools_n * cfg.heads * cfg.head_dim * 4))
    torch.manual_seed(0)
    model = ToyCausalDiT(cfg).eval().requires_grad_(False).to(device)
    k_pools = [torch.zeros(slots, cfg.heads, cfg.head_dim, device=device) for _ in range(cfg.num_layers)]
    v_pools = [torch.zeros(slots, cfg.heads, cfg.head_dim, device=device) for _ in range(cfg.num_layers)]
    noise = torch.randn(cfg.num_chunks, cfg.chunk_tokens, cfg.dim, generator=torch.Generator().manual_seed(0))
    noise, t = noise.to(device), torch.tensor([0.5], device=device)
    steps = [tuple(s.to(device) for s in chunk_slots(cfg, c)) for c in range(cfg.num_chunks)]

    def driver(step: Callable[..., Any]) -> Any:
        return torch.stack([step(noise[c], t, k_pools, v_pools, *steps[c]) for c in range(cfg.num_chunks)])

    pools = {f"layer{i}.{kv}": p for i in range(cfg.num_layers) for kv, p in (("k", k_pools[i]), ("v", v_pools[i]))}
    case = Case("bench", model, pools=pools, driver=driver, check_writes=mode == "check_writes_on")
    actual = sum(p.numel() * p.element_size() for p in pools.values())
    t0 = time.perf_counter()
    with _peak(device) as mem:
        if mode == "plain":
            driver(torch.compile(model))
        else:
            result = run_case(case, analysis_only=analysis_only)
            if not result.passed:
                raise RuntimeError(f"the case failed under the check: {result.report.problems}")
    return {"kind": "memory", "mode": mode, "pool_bytes": actual, "seconds": time.perf_counter() - t0, **mem}


# ---- the driver: one subprocess per point --------------------------------------------------------


def _run_point(point: dict[str, Any], timeout: float) -> dict[str, Any]:
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(ROOT)]  # the caller's first
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "PYTHONPATH": os.pathsep.join(path)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--point", json.dumps(point)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {**point, "error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {**point, "error": f"exit {done.returncode}: {tail}"}
    return {**point, **json.loads(lines[-1])}


def _memory_rows(results: list[dict[str, Any]]) -> list[str]:
    rows = ["| pools | mode | extra peak | over plain compile | x pools | seconds |", "|---|---|---|---|---|---|"]
    plain = {r["pool_bytes"]: r["extra"] for r in results if r.get("mode") == "plain" and "extra" in r}
    for r in results:
        if "error" in r:
            rows.append(f"| {r['pool_gib']} GiB | {r['mode']} | error: {r['error']} | | | |")
            continue
        base = plain.get(r["pool_bytes"])
        over = r["extra"] - base if base is not None else None
        r["extra_over_plain"] = over
        r["extra_over_plain_x_pools"] = over / r["pool_bytes"] if over is not None else None
        cells = [
            f"{r['pool_bytes'] / GIB:.2f} GiB",
            r["mode"],
            f"{r['extra'] / 2**20:.0f} MiB",
            f"{over / 2**20:+.0f} MiB" if over is not None else "-",
            f"{over / r['pool_bytes']:+.3f}x" if over is not None else "-",
            f"{r['seconds']:.1f}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _time_rows(results: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| blocks | hidden x tokens | calls | pools | eager rollout | write check | x eager | extra peak | x pools |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['blocks']} | error: {r['error']} | | | | | | | |")
            continue
        rows.append(
            f"| {r['blocks']} | {r['hidden']} x {r['tokens']} | {r['calls']} | {r['pool_bytes'] / 2**20:.0f} MiB | "
            f"{r['eager_rollout_s']:.2f} s | {r['write_check_s']:.2f} s | {r['write_check_over_eager']:.2f}x | "
            f"{r['extra_peak_bytes'] / 2**20:.0f} MiB | {r['extra_peak_x_pools']:.3f}x |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.bench_writes", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gib", type=float, nargs="*", default=[0.5, 2.0], help="total pool sizes (memory)")
    parser.add_argument("--blocks", type=int, nargs="*", default=[4, 16], help="DiT blocks (time; up to 48)")
    parser.add_argument("--hidden", type=int, default=1024, help="DiT hidden size (heads of 64)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per chunk")
    parser.add_argument("--pool-chunks", type=int, nargs="*", default=[8], help="chunks each block's pools hold")
    parser.add_argument("--small", action="store_true", help="CI-fast: hidden 128, 32 tokens, 2 blocks, no memory")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per time point (median)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (memory points)")
    parser.add_argument("--full-compile", action="store_true", help="the check with Inductor's codegen (slow on CPU)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per point")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "results" / "bench_writes.json")
    parser.add_argument("--point", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.point:  # usage errors before the run, not after it
        from reports.cli_args import out_file, positive

        out_file(parser, args.out, name="bench_writes.json")
        positive(parser, "--blocks", *args.blocks)
        positive(parser, "--sizes-gib", *args.sizes_gib)
        positive(parser, "--repeats", args.repeats)
        positive(parser, "--timeout", args.timeout)
    if args.point:  # a child: one point, its result as the last line of stdout
        import torch

        torch.set_num_threads(1)
        p = json.loads(args.point)
        if p["kind"] == "memory":
            out = memory_point(p["pool_bytes"], p["mode"], p["device"], p["analysis_only"])
        else:
            from reports.bench_writes_dit import dit_point

            out = dit_point(p["blocks"], p["repeats"], p["hidden"], p["tokens"], p["pool_chunks"])
        print(json.dumps(out))
        return 0
    memory: list[dict[str, Any]] = []
    timing: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_writes_inductor_") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # the children's compiles stay out of the user's cache
        if args.small:
            args.blocks, args.hidden, args.tokens, args.sizes_gib = [2], 128, 32, []
        for blocks in sorted(args.blocks):
            for chunks in args.pool_chunks:
                point = {"kind": "time", "blocks": blocks, "repeats": args.repeats, "hidden": args.hidden}
                point |= {"tokens": args.tokens, "pool_chunks": chunks}
                timing.append(_run_point(point, args.timeout))
                print(_time_rows(timing[-1:])[-1], flush=True)
        for gib in sorted(args.sizes_gib):
            for mode in MODES:
                point = {
                    "kind": "memory",
                    "pool_gib": gib,
                    "pool_bytes": int(gib * GIB),
                    "mode": mode,
                    "device": args.device,
                    "analysis_only": not args.full_compile,
                }
                memory.append(_run_point(point, args.timeout))
                print(f"  {gib} GiB {mode}: {memory[-1].get('extra', memory[-1].get('error'))}", flush=True)
    table = ["## Memory (extra peak beyond the baseline)", *_memory_rows(memory), ""]
    table += ["## Time (DiT stack, per-call write check)", *_time_rows(timing)]
    print("\n".join(table))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": args.device, "analysis_only": not args.full_compile, "repeats": args.repeats, "small": args.small}
    args.out.write_text(json.dumps({"meta": meta, "memory": memory, "time": timing}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
