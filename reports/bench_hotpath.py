"""``python -m reports.bench_hotpath``: what the commit op and the read path cost per call.

Separate from the tests (timings are not verdicts). Four tables, each a pandas
DataFrame from one function so ``python -m reports.bench`` can print them too:

* ``eager_op_table``: eager ``paged_write`` (its registered CPU kernel: the C++
  one when built, see ``ar_paging.native``) vs a bare ``index_copy_`` of K and V
  (the op's whole work), vs the pure-Python kernel (the same body registered with
  ``Library``) and vs the previous op (``custom_op`` + three syncs).
* ``dispatch_table``: the same body registered with ``torch.library.custom_op``
  vs ``torch.library.Library`` + ``register_fake`` (vLLM's
  ``direct_register_custom_op`` way), and both with an empty body.
* ``compiled_step_table``: a compiled commit step (per layer: gather a window, mix
  it into the chunk's K/V, commit) with ``paged_write`` (lowered to Inductor's scatter,
  ``ar_paging.lowering``; with the lowering off, i.e. the fallback op call; and the op
  with the pure-Python kernel) vs the same step written with Inductor's native ``index_copy_``, at
  small windows (32 tokens x 2 layers, 48 x 1) and a realistic one (2048 x 1).
* ``resident_window_table``: ``resident_window`` vs a vectorized reference (the
  bare expansion, no validation) and vs the previous implementation, at windows
  of 1k-64k tokens over histories up to 256k tokens.

Method: one thread; the variants of a row are timed in interleaved rounds
(order reversed every round) so machine noise hits them alike; each sample
repeats the call for ~``sample_s``; the table shows median microseconds per call
and the median of the per-round ratios to the row's baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import torch

import ar_paging
from ar_paging import resident_window

_impl = sys.modules["ar_paging.paged_write"]  # the module (ar_paging.paged_write is the op)


# ── timing ──────────────────────────────────────────────────────────────────


def interleaved_medians(
    fns: dict[str, Callable[[], object]], baseline: str, *, rounds: int = 41, sample_s: float = 0.0005
) -> dict[str, tuple[float, float, float]]:
    """``{name: (median us per call, min us per call, median per-round ratio to baseline)}``.

    Samples are short (``sample_s``, under a scheduler time slice) so that on a
    shared machine many of them run uninterrupted; the minimum is reported next
    to the median as the less noise-sensitive figure.
    """
    inner = {}
    for name, fn in fns.items():  # warm up, then size each sample to ~sample_s
        fn()
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < sample_s / 4:
            fn()
            n += 1
        inner[name] = max(1, 4 * n)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns)
    for r in range(rounds):
        for name in order if r % 2 == 0 else reversed(order):
            fn, n = fns[name], inner[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - start) / n * 1e6)
    base = samples[baseline]
    return {
        name: (statistics.median(s), min(s), statistics.median(a / b for a, b in zip(s, base)))
        for name, s in samples.items()
    }


def _rows(results: dict[str, tuple[float, float, float]], **fixed: object) -> list[dict[str, object]]:
    return [
        {**fixed, "variant": name, "median_us": round(med, 2), "min_us": round(low, 2), "ratio": round(ratio, 2)}
        for name, (med, low, ratio) in results.items()
    ]


# ── comparison ops (bench-only namespace) ───────────────────────────────────

_BENCH_LIB: torch.library.Library | None = None


def _bench_ops() -> torch._ops._OpNamespace:
    """Register once: the same body under custom_op and Library, empty bodies, and the previous op."""
    global _BENCH_LIB
    if _BENCH_LIB is not None:
        return torch.ops.ar_paging_bench
    lib = _BENCH_LIB = torch.library.Library("ar_paging_bench", "FRAGMENT")
    schema = "(Tensor(a0!) k_pool, Tensor(a1!) v_pool, Tensor new_k, Tensor new_v, Tensor slot_mapping) -> ()"

    def empty(k_pool, v_pool, new_k, new_v, slot_mapping) -> None:
        return None

    def previous(k_pool, v_pool, new_k, new_v, slot_mapping) -> None:
        """The op before issue 10: the same writes plus int(min), int(max) and unique (three syncs)."""
        _impl._check_shapes(k_pool, v_pool, new_k, new_v, slot_mapping)
        slots = slot_mapping.reshape(-1)
        _impl._check_slot_values(slots, k_pool.shape[0])
        k_pool.index_copy_(0, slots, new_k.reshape(-1, *k_pool.shape[1:]))
        v_pool.index_copy_(0, slots, new_v.reshape(-1, *k_pool.shape[1:]))

    for name, body in (("noop_library", empty), ("write_library", _impl._paged_write_impl)):
        lib.define(name + schema)
        lib.impl(name, body, "CompositeExplicitAutograd")
        torch.library.register_fake(f"ar_paging_bench::{name}", empty, lib=lib)
    for name, body in (("noop_custom_op", empty), ("write_custom_op", _impl._paged_write_impl), ("previous", previous)):
        op = torch.library.custom_op(f"ar_paging_bench::{name}", body, mutates_args=("k_pool", "v_pool"), schema=schema)
        op.register_fake(empty)
    return torch.ops.ar_paging_bench


def _pools(num_slots: int, heads: int, dim: int, tokens: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    k_pool, v_pool = torch.zeros(num_slots, heads, dim), torch.zeros(num_slots, heads, dim)
    new_k, new_v = torch.randn(tokens, heads, dim, generator=gen), torch.randn(tokens, heads, dim, generator=gen)
    slots = torch.randperm(num_slots, generator=gen)[:tokens]
    return k_pool, v_pool, new_k, new_v, slots


GEOMETRIES = {"tiny (2 heads x 16)": (2, 16), "realistic (8 heads x 128)": (8, 128)}


def eager_op_table(tokens: Sequence[int] = (16, 1024), *, num_slots: int = 8192, rounds: int = 41) -> pd.DataFrame:
    """Eager ``paged_write`` (now and before) vs bare ``index_copy_`` of K and V; ratio to bare."""
    ops = _bench_ops()
    rows = []
    for geometry, (heads, dim) in GEOMETRIES.items():
        for n in tokens:
            k, v, nk, nv, s = _pools(num_slots, heads, dim, n)

            def bare() -> None:
                k.index_copy_(0, s, nk)
                v.index_copy_(0, s, nv)

            fns = {
                "bare index_copy_ (K and V)": bare,
                "paged_write": lambda: torch.ops.ar_paging.paged_write(k, v, nk, nv, s),
                "paged_write Python kernel": lambda k=k, v=v, nk=nk, nv=nv, s=s: ops.write_library(k, v, nk, nv, s),
                "paged_write before (custom_op + 3 syncs)": lambda: ops.previous(k, v, nk, nv, s),
            }
            results = interleaved_medians(fns, "bare index_copy_ (K and V)", rounds=rounds)
            rows += _rows(results, geometry=geometry, tokens=n)
    return pd.DataFrame(rows)


def dispatch_table(*, tokens: int = 16, rounds: int = 41) -> pd.DataFrame:
    """Same body, two registrations; ratio to the Library registration of the same body."""
    ops = _bench_ops()
    k, v, nk, nv, s = _pools(1024, 2, 16, tokens)
    rows = []
    for body in ("noop", "write"):
        lib_op, custom = getattr(ops, f"{body}_library"), getattr(ops, f"{body}_custom_op")
        fns = {
            f"Library + register_fake ({body})": lambda op=lib_op: op(k, v, nk, nv, s),
            f"custom_op ({body})": lambda op=custom: op(k, v, nk, nv, s),
        }
        rows += _rows(interleaved_medians(fns, f"Library + register_fake ({body})", rounds=rounds), body=body)
    return pd.DataFrame(rows)


# ── compiled commit step ────────────────────────────────────────────────────


def _mix(k_pool, v_pool, x, window_slots):
    """One attention read of the window by the chunk (heads folded), whose output feeds the commit."""
    t, w = x.shape[0], window_slots.shape[0]
    kw = k_pool.index_select(0, window_slots).reshape(w, -1)
    vw = v_pool.index_select(0, window_slots).reshape(w, -1)
    q = x.reshape(t, -1)
    ctx = (torch.softmax(q @ kw.T / q.shape[1] ** 0.5, dim=-1) @ vw).view_as(x)
    return x + ctx, x - ctx, ctx


def _commit_op(k_pool, v_pool, new_k, new_v, slots):
    torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slots)


def _commit_op_fallback(k_pool, v_pool, new_k, new_v, slots):
    """``_commit_op`` under another identity: dynamo guards on it, so this step compiles on its own
    (with the lowering off) instead of reusing the lowered one."""
    torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slots)


def _commit_python(k_pool, v_pool, new_k, new_v, slots):
    """The same op body as the pure-Python kernel (``Library`` registration, bench namespace)."""
    torch.ops.ar_paging_bench.write_library(k_pool, v_pool, new_k, new_v, slots)


def _commit_native(k_pool, v_pool, new_k, new_v, slots):
    k_pool.index_copy_(0, slots, new_k)
    v_pool.index_copy_(0, slots, new_v)


def _make_step(commit: Callable[..., None]) -> Callable[..., torch.Tensor]:
    def step(k_pools, v_pools, x, window_slots, commit_slots):
        """Per layer: read the window, mix it into the chunk, commit; the next layer reads this one's output."""
        total = x.new_zeros(())
        for k_pool, v_pool in zip(k_pools, v_pools):
            new_k, new_v, ctx = _mix(k_pool, v_pool, x, window_slots)
            commit(k_pool, v_pool, new_k, new_v, commit_slots)
            total, x = total + ctx.sum(), ctx
        return total

    return step


step_paged_write = _make_step(_commit_op)
step_paged_write_fallback = _make_step(_commit_op_fallback)
step_python_kernel = _make_step(_commit_python)
step_native = _make_step(_commit_native)


def compiled_step_table(
    cases: Sequence[tuple[int, int]] = ((32, 2), (48, 1), (2048, 1)),
    *,
    chunk: int = 16,
    heads: int = 8,
    dim: int = 128,
    rounds: int = 41,
) -> pd.DataFrame:
    """Compiled step with ``paged_write`` (and its Python kernel) vs with native ``index_copy_``; ratio to native.

    ``cases``: ``(window tokens, layers)``.
    """
    import torch._inductor.config as inductor_config

    inductor_config.force_disable_caches = True
    # No compile-worker subprocesses: a pool still starting up (importing torch) steals the CPU from the
    # first case's timing rounds.
    inductor_config.compile_threads = 1
    _bench_ops()
    gen = torch.Generator().manual_seed(0)
    rows = []
    for window, layers in cases:
        num_slots = max(4096, 2 * (window + chunk))
        k_pools = [torch.randn(num_slots, heads, dim, generator=gen) for _ in range(layers)]
        v_pools = [torch.randn(num_slots, heads, dim, generator=gen) for _ in range(layers)]
        x = torch.randn(chunk, heads, dim, generator=gen)
        perm = torch.randperm(num_slots, generator=gen)
        window_slots, commit_slots = perm[:window], perm[window : window + chunk]
        args = (k_pools, v_pools, x, window_slots, commit_slots)
        torch._dynamo.reset()
        compiled = {
            "native index_copy_": torch.compile(step_native, fullgraph=True, dynamic=False),
            "paged_write": torch.compile(step_paged_write, fullgraph=True, dynamic=False),
            "paged_write, lowering off": torch.compile(step_paged_write_fallback, fullgraph=True, dynamic=False),
            "paged_write Python kernel": torch.compile(step_python_kernel, fullgraph=True, dynamic=False),
        }
        for name, fn in compiled.items():  # same pools as the eager step, or the timing is meaningless
            got = ([p.clone() for p in k_pools], [p.clone() for p in v_pools])
            lowering_was = ar_paging.lowering_enabled()
            ar_paging.set_lowering_enabled(name != "paged_write, lowering off")  # read when the first call compiles
            try:
                fn(*got, *args[2:])
            finally:
                ar_paging.set_lowering_enabled(lowering_was)
            want = ([p.clone() for p in k_pools], [p.clone() for p in v_pools])
            step_native(*want, *args[2:])
            if not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got[0] + got[1], want[0] + want[1])):
                raise AssertionError(f"compiled step '{name}' at window {window} differs from eager")
        fns = {name: (lambda fn=fn: fn(*args)) for name, fn in compiled.items()}
        results = interleaved_medians(fns, "native index_copy_", rounds=rounds)
        rows += _rows(results, window=window, layers=layers, chunk=chunk)
    return pd.DataFrame(rows)


# ── resident_window ─────────────────────────────────────────────────────────


def reference_resident_window(
    table: torch.Tensor, block_size: int, null_block_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The bare vectorized expansion (whole blocks, no validation): the floor to compare against."""
    index = torch.nonzero(table != null_block_id).squeeze(1)
    offsets = torch.arange(block_size)
    return (table[index, None] * block_size + offsets).reshape(-1), (index[:, None] * block_size + offsets).reshape(-1)


def previous_resident_window(table: torch.Tensor, num_tokens: int, block_size: int, null_block_id: int):
    """The implementation before issue 10: an ``arange`` over the whole history."""
    positions = torch.arange(num_tokens, dtype=torch.long)
    blocks = table[torch.div(positions, block_size, rounding_mode="floor")]
    keep = blocks != null_block_id
    positions = positions[keep]
    return blocks[keep] * block_size + positions % block_size, positions


def resident_window_table(
    windows: Sequence[int] = (1024, 4096, 16384, 65536),
    histories: Sequence[int] = (65536, 262144),
    *,
    block_size: int = 16,
    rounds: int = 15,
) -> pd.DataFrame:
    """``resident_window`` vs the vectorized reference and the previous implementation; ratio to reference."""
    rows = []
    for history in histories:
        num_blocks = history // block_size
        real = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(1)) + 1  # 0 is the null block
        for window in windows:
            if window > history:
                continue
            table = torch.zeros(num_blocks, dtype=torch.long)
            resident = window // block_size
            table[-resident:] = real[-resident:]  # the window at the end, everything earlier evicted
            got = resident_window(table, history, block_size, 0)
            ref = reference_resident_window(table, block_size, 0)
            assert torch.equal(got.slots, ref[0]) and torch.equal(got.positions, ref[1])
            fns = {
                "vectorized reference": lambda: reference_resident_window(table, block_size, 0),
                "resident_window": lambda: resident_window(table, history, block_size, 0),
                "resident_window before": lambda: previous_resident_window(table, history, block_size, 0),
            }
            results = interleaved_medians(fns, "vectorized reference", rounds=rounds, sample_s=0.002)
            rows += _rows(results, window=window, history=history)
    return pd.DataFrame(rows)


# ── CLI ─────────────────────────────────────────────────────────────────────

TABLES: dict[str, Callable[..., pd.DataFrame]] = {
    "eager": eager_op_table,
    "dispatch": dispatch_table,
    "compiled": compiled_step_table,
    "resident": resident_window_table,
}


def machine_facts() -> dict[str, object]:
    """What ran a benchmark: the docs' performance page prints it beside every figure."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.bench_hotpath", description=__doc__.split("\n")[0])
    parser.add_argument("tables", nargs="*", metavar="TABLE", help=f"any of {', '.join(TABLES)} (default: all)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds per row")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="also write DIR/bench_hotpath.json (the command, the machine, every table's rows): "
        "the docs' performance page is generated from it",
    )
    args = parser.parse_args(argv)
    unknown = [t for t in args.tables if t not in TABLES]
    if unknown:
        parser.error(f"unknown table(s) {unknown}; choose from {list(TABLES)}")
    if args.out is not None:
        from reports.cli_args import out_dir

        out_dir(parser, args.out)
    torch.set_num_threads(1)
    debug = "on" if ar_paging.debug_checks_enabled() else "off"
    print(
        f"torch {torch.__version__}, 1 thread, debug checks {debug}, paged_write CPU kernel: "
        f"{ar_paging.paged_write_kernel()}"
    )
    tables = {}
    for name in args.tables or TABLES:
        kwargs = {} if args.rounds is None else {"rounds": args.rounds}
        df = TABLES[name](**kwargs)
        tables[name] = df.to_dict(orient="records")
        print(f"\n## {name}\n")
        print(df.to_markdown(index=False))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        command = "python -m reports.bench_hotpath " + " ".join(argv if argv is not None else sys.argv[1:])
        doc = {
            "command": command.strip(),
            "machine": machine_facts(),
            "kernel": ar_paging.paged_write_kernel(),
            "debug_checks": debug,
            "tables": tables,
        }
        (args.out / "bench_hotpath.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
