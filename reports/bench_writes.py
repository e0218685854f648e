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
* **time**: examples/engine_blocks' per-block engine at ``--blocks`` blocks, no compile at all (Inductor
  compiles would swamp the numbers): the eager rollout (median of ``--repeats``), the eager
  reference the check takes (``write_reference``: snapshot, the rollout under the watcher, restore),
  its compare, and the watch of the compiled run, approximated by the same eager rollout under the
  regions' watcher minus the plain rollout (an upper bound: eagerly every ATen op passes the watcher,
  compiled only the opaque ones do; its "mode floor" is what a dispatch mode that only passes each op
  through costs the same rollout). ``write_check`` = reference + compare + watch, reported as a
  multiple of the eager rollout (target: <= 1.5x at 48 blocks). The parts are timed in interleaved
  rounds (each part once per round, ``--repeats`` rounds); each figure is a median over the rounds,
  the multiple the median of the per-round multiples.

Results go to ``reports/results/bench_writes.json`` (``--out``) and a table is printed. Not a test:
run it by hand (``--sizes-gib 0.5 --blocks 4 16`` for a quick look). Each process uses one thread.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
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


def _rounds(fns: dict[str, Callable[[], Any]], repeats: int) -> list[dict[str, float]]:
    """Seconds of each function, run in interleaved rounds (all of them once per round), so a machine
    that is busier in one moment slows every part of that round alike."""
    out = []
    for _ in range(repeats):
        times = {}
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name] = time.perf_counter() - t0
        out.append(times)
    return out


def _passthrough_mode() -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    return Passthrough()


def time_point(blocks: int, repeats: int) -> dict[str, Any]:
    """Seconds of the write check's parts against an eager rollout of the per-block engine."""
    sys.path.insert(0, str(ROOT / "examples" / "engine_blocks"))
    from blocks_dit import BlocksConfig
    from cases import build_case

    from compile_checks.case.run_findings import write_reference
    from compile_checks.check.writes.watcher import WriteWatcher
    from compile_checks.pools import resolve_pools

    case = build_case("bench", cfg=BlocksConfig(num_layers=blocks))  # builds its reference: a warm-up
    model, driver = case.fn, case.driver
    assert driver is not None
    pools = resolve_pools(case.pools) or {}
    ref = write_reference(case)
    if isinstance(ref, str):
        raise RuntimeError(ref)
    try:  # one narrowing policy per check session, so per rollout (compile_checks.check.writes.reach)
        from compile_checks.check.writes.reach import WriteReach

        def watcher() -> Any:
            return WriteWatcher(pools, reach=WriteReach())
    except ImportError:  # a checker without it (an older one, for a before/after)

        def watcher() -> Any:
            return WriteWatcher(pools)

    def watched() -> None:
        with watcher():
            driver(model)

    def passthrough() -> None:  # what any Python dispatch mode costs an eager run, watching nothing
        with _passthrough_mode():
            driver(model)

    rounds = _rounds(
        {
            "eager": lambda: driver(model),
            "reference": lambda: write_reference(case),
            "compare": lambda: ref.compare(pools),
            "watched": watched,
            "passthrough": passthrough,
        },
        repeats,
    )

    def median(part: Callable[[dict[str, float]], float]) -> float:
        return statistics.median(part(r) for r in rounds)

    eager = median(lambda r: r["eager"])
    reference = median(lambda r: r["reference"])
    compare = median(lambda r: r["compare"])
    watch = median(lambda r: max(0.0, r["watched"] - r["eager"]))
    floor = median(lambda r: max(0.0, r["passthrough"] - r["eager"]))
    total = reference + compare + watch
    ratio = median(lambda r: (r["reference"] + r["compare"] + max(0.0, r["watched"] - r["eager"])) / r["eager"])
    return {
        "kind": "time",
        "blocks": blocks,
        "pools": len(pools),
        "pool_bytes": sum(p.numel() * p.element_size() for p in pools.values()),
        "eager_rollout_s": eager,
        "eager_reference_s": reference,
        "compare_s": compare,
        "region_watch_s": watch,
        "dispatch_mode_floor_s": floor,  # part of region_watch_s: a mode that only passes every op through
        "write_check_s": total,
        "write_check_over_eager": ratio,  # the median of the per-round ratios
    }


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
        "| blocks | eager rollout | eager reference | compare | region watch (mode floor) | write check | x eager |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['blocks']} | error: {r['error']} | | | | | |")
            continue
        ms = [f"{r[k] * 1e3:.1f} ms" for k in ("eager_rollout_s", "eager_reference_s", "compare_s")]
        ms.append(f"{r['region_watch_s'] * 1e3:.1f} ms ({r['dispatch_mode_floor_s'] * 1e3:.1f} ms)")
        rows.append(
            f"| {r['blocks']} | " + " | ".join(ms) + f" | {r['write_check_s'] * 1e3:.1f} ms | "
            f"{r['write_check_over_eager']:.2f}x |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.bench_writes", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gib", type=float, nargs="*", default=[0.5, 2.0], help="total pool sizes (memory)")
    parser.add_argument("--blocks", type=int, nargs="*", default=[4, 16, 48], help="block counts (time)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per time point (median)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (memory points)")
    parser.add_argument("--full-compile", action="store_true", help="the check with Inductor's codegen (slow on CPU)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per point")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "results" / "bench_writes.json")
    parser.add_argument("--point", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.point:  # a child: one point, its result as the last line of stdout
        import torch

        torch.set_num_threads(1)
        p = json.loads(args.point)
        if p["kind"] == "memory":
            out = memory_point(p["pool_bytes"], p["mode"], p["device"], p["analysis_only"])
        else:
            out = time_point(p["blocks"], p["repeats"])
        print(json.dumps(out))
        return 0
    memory: list[dict[str, Any]] = []
    timing: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_writes_inductor_") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # the children's compiles stay out of the user's cache
        for blocks in sorted(args.blocks):
            timing.append(_run_point({"kind": "time", "blocks": blocks, "repeats": args.repeats}, args.timeout))
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
    table = ["## Memory (extra peak beyond the baseline)", *_memory_rows(memory), "", "## Time", *_time_rows(timing)]
    print("\n".join(table))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": args.device, "analysis_only": not args.full_compile, "repeats": args.repeats}
    args.out.write_text(json.dumps({"meta": meta, "memory": memory, "time": timing}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
