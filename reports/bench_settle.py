"""``python -m reports.bench_settle``: what settling Inductor's buffer choices costs the default gate.

Why: the default (analysis-only) gate stops each compile after the post-grad passes, except for a graph
holding a copy whose buffer is Inductor's lowering choice: Inductor generates that graph's code (no kernel
built) and the code settles the copy. Two figures:

* the built-in gate (``compile-checks gate --json --jobs 1``, default mode), each case's ``wall_seconds`` and
  the run's total, with settling on and off (off: no graph gets its code generated, as the analysis-only gate
  was before it settled; a choice is then undecided). Goal: on / off <= 1.1.
* the AR window pattern (read the window, slice-write the chunk, attend; 3 chunks of a 12-token cache, static
  sizes, split and fused K/V): each region's settle cost (its ``codegen`` phase seconds), the case's wall
  seconds on and off, and its verdict (on: clean, as the generated code; off: undecided).

Each run is a fresh process; modes are interleaved over ``--rounds`` rounds (on, off, off, on, ...) so
machine noise hits both alike; medians are reported. Results go to ``reports/results/bench_settle.json``
(``--out``) and a table is printed. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("on", "off")
CHUNKS, TOKENS, H, D = 3, 4, 2, 8


def _settling(mode: str) -> None:
    """``off``: no graph gets its code generated (the analysis-only gate before it settled)."""
    if mode == "off":
        from compile_checks.check import backend

        backend.needs_code = lambda sites: False  # type: ignore[assignment]


def _child_gate(mode: str) -> int:
    _settling(mode)
    from compile_checks.cli import main

    return main(["gate", "--json", "--no-progress", "--jobs", "1"])


def _window_case(layout: str) -> Any:
    import torch

    from compile_checks import Case

    def step(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        old_k, old_v = k[:, :end] * 1, v[:, :end] * 1
        k[:, start:end] = x
        v[:, start:end] = x
        return (k[:, :end] + 0 * old_k).sum() + (v[:, :end] + 0 * old_v).sum()

    shape = (1, CHUNKS * TOKENS, H, D)
    if layout == "fused":
        kv = torch.zeros(2, *shape)
        k, v = kv[0], kv[1]
    else:
        k, v = torch.zeros(shape), torch.zeros(shape)
    x = torch.randn(1, TOKENS, H, D)

    def driver(compiled: Any) -> Any:
        return [compiled(k, v, x, c * TOKENS, (c + 1) * TOKENS) for c in range(CHUNKS)][-1]

    return Case(layout, step, driver=driver, pools={"k": k, "v": v}, expect_clean=True, dynamic=False)


def _child_window(mode: str) -> int:
    _settling(mode)
    from compile_checks.case import run_case

    out = {}
    for layout in ("split", "fused"):
        result = run_case(_window_case(layout), analysis_only=True)
        report = result.report
        out[layout] = {
            "wall_s": result.wall_seconds,
            "codegen_s": [p["codegen"] for _, p in sorted(report.region_phase_seconds.items())],
            "passed": result.passed,
            "copies": len(report.clones),
            "undecided": len({(c.region, c.node) for c in report.undecided}),
        }
    print(json.dumps(out))
    return 0


def _run(kind: str, mode: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "reports.bench_settle", "--child", kind, "--mode", mode]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    text = done.stdout.strip()
    try:
        return json.loads(text[text.index("{") :])  # the gate's --json document, or the window child's line
    except (json.JSONDecodeError, ValueError):
        raise SystemExit(f"{' '.join(cmd)} gave no JSON (exit {done.returncode}):\n{done.stderr[-3000:]}") from None


def measure(rounds: int) -> dict[str, Any]:
    gate: dict[str, dict[str, list[float]]] = {}
    totals: dict[str, list[float]] = {m: [] for m in MODES}
    window: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
            doc = _run("gate", mode)
            for case in doc["cases"]:
                gate.setdefault(case["label"], {m: [] for m in MODES})[mode].append(float(case["wall_seconds"]))
            totals[mode].append(sum(float(c["wall_seconds"]) for c in doc["cases"]))
            for layout, row in _run("window", mode).items():
                window.setdefault(layout, {m: [] for m in MODES})[mode].append(row)
            print(f"[bench_settle] round {r + 1}/{rounds} settling {mode}: done", flush=True)
    med = statistics.median
    return {
        "gate": {
            "total_s": {m: round(med(totals[m]), 2) for m in MODES},
            "on_over_off": round(med(a / b for a, b in zip(totals["on"], totals["off"])), 3),
            "cases": {label: {m: round(med(v[m]), 2) for m in MODES} for label, v in gate.items()},
        },
        "window": {
            layout: {
                "wall_s": {m: round(med(r["wall_s"] for r in v[m]), 2) for m in MODES},
                "settle_s_per_region": [round(med(s), 2) for s in zip(*(r["codegen_s"] for r in v["on"]))],
                "verdict": {
                    m: {k: v[m][-1][k] for k in ("passed", "copies", "undecided")} for m in MODES
                },  # the same every round
            }
            for layout, v in window.items()
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.bench_settle", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "results", help="folder for bench_settle.json")
    parser.add_argument("--child", choices=("gate", "window"), help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, default="on", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "gate":
        return _child_gate(args.mode)
    if args.child == "window":
        return _child_window(args.mode)
    from reports.bench_hotpath import machine_facts  # lazy: imports torch

    result = measure(args.rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": "python -m reports.bench_settle " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine_facts(),
        "rounds": args.rounds,
        **result,
    }
    (args.out / "bench_settle.json").write_text(json.dumps(doc, indent=2) + "\n")
    g = result["gate"]
    on, off = g["total_s"]["on"], g["total_s"]["off"]
    print(f"built-in gate, default mode: {on} s settling, {off} s not ({g['on_over_off']}x)")
    for layout, w in result["window"].items():
        print(
            f"window {layout}: settle {w['settle_s_per_region']} s per region; wall {w['wall_s']['on']} s settling, "
            f"{w['wall_s']['off']} s not; verdict settling {w['verdict']['on']}, not {w['verdict']['off']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
