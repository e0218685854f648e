"""``python -m reports.bench_full``: what ``gate --full`` costs per case beside the default analysis-only gate.

Why: analysis-only decides the copy verdict on the post-grad graph and compares eager with that graph
run as FX, never with Inductor's generated code; ``--full`` lowers, builds and runs the generated code,
the only run that sees a codegen miscompile (an op handed ``reinterpret_tensor(buf, ..., 0)``: V written
at K's offset). CI runs ``--full`` at least for the negative controls; this measures the price.

Method: for each target (a gate target, run from its own folder as a user runs it) the gate runs once
per mode in a fresh process (``compile-checks gate TARGET --pipeline stock --jobs 1 --json``, with and
without ``--full``), modes interleaved over ``--rounds`` rounds (analysis, full, full, analysis, ...) so
machine noise hits both alike. Each case's ``wall_seconds`` (compile + run + the write check's eager
reference) comes from the gate's own ``--json``; per case the medians per mode and the median of the
per-round full/analysis ratios are reported.

Results go to ``reports/results/bench_full.json`` (``--out``) and a table is printed. Not a test: run it
by hand; the CI guide's figure is generated from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TARGETS: tuple[str, ...] = (
    "examples/engine_blocks/cases.py:cases",
    "examples/engine_regional/cases.py:cases",
)
MODES = ("analysis", "full")


def gate_once(target: str, full: bool) -> dict[str, float]:
    """Each case's wall seconds (the gate's ``--json``) from one gate run of ``target`` in a fresh process."""
    path, name = target.rsplit(":", 1)
    folder = (ROOT / path).parent
    cmd = [sys.executable, "-m", "compile_checks", "gate", f"{Path(path).name}:{name}", "--pipeline", "stock"]
    cmd += ["--jobs", "1", "--json", "--no-progress", *(["--full"] if full else ["--analysis-only"])]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, check=False)
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(
            f"{' '.join(cmd)} (in {folder}) gave no JSON (exit {done.returncode}):\n{done.stderr[-3000:]}"
        ) from None
    return {c["label"]: float(c["wall_seconds"]) for c in doc["cases"]}


def measure(targets: Sequence[str], rounds: int) -> list[dict[str, Any]]:
    """Rows per case: median seconds per mode, the median per-round ratio, the seconds --full adds."""
    rows = []
    for target in targets:
        samples: dict[str, dict[str, list[float]]] = {}
        for r in range(rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                t0 = time.perf_counter()
                for label, seconds in gate_once(target, mode == "full").items():
                    samples.setdefault(label, {m: [] for m in MODES})[mode].append(seconds)
                print(
                    f"[bench_full] {target} round {r + 1}/{rounds} {mode}: {time.perf_counter() - t0:.0f} s", flush=True
                )
        for label, per_mode in samples.items():
            analysis, full = per_mode["analysis"], per_mode["full"]
            rows.append(
                {
                    "target": target,
                    "case": label,
                    "analysis_s": round(statistics.median(analysis), 2),
                    "full_s": round(statistics.median(full), 2),
                    "full_over_analysis": round(statistics.median(f / a for f, a in zip(full, analysis)), 2),
                    "added_s": round(statistics.median(full) - statistics.median(analysis), 2),
                }
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.bench_full", description=__doc__.split("\n")[0])
    parser.add_argument("targets", nargs="*", default=list(DEFAULT_TARGETS), metavar="TARGET", help="gate targets")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per target (default 2)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "results", help="folder for bench_full.json")
    args = parser.parse_args(argv)
    from reports.cli_args import out_dir, positive

    out_dir(parser, args.out)
    positive(parser, "--rounds", args.rounds)
    from reports.bench_hotpath import machine_facts  # lazy: imports torch

    rows = measure(args.targets, args.rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": "python -m reports.bench_full " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine_facts(),
        "rounds": args.rounds,
        "rows": rows,
    }
    (args.out / "bench_full.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{'case':<40} {'analysis s':>10} {'full s':>8} {'full/analysis':>13} {'added s':>8}")
    for row in rows:
        print(
            f"{row['target'].split('/')[-2] + '/' + row['case']:<40} {row['analysis_s']:>10} {row['full_s']:>8} "
            f"{row['full_over_analysis']:>13} {row['added_s']:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
