"""``python -m reports.bench_production``: what the production-size verdict costs, against its floor.

Why: a production-size case built without allocating (``examples/wan14b_meta``: 40 blocks of width
5120, bf16, each block compiled on its own) gets its analysis-only verdict from dynamo, AOTAutograd and
Inductor's post-grad passes per block, plus the check's own work. The floor for that work is plain
``torch.compile`` of the same stack under ``FakeTensorMode``, stopped after the post-grad passes
(:func:`compile_checks.case.floor.floor_run`): what the check costs beyond it is the check's.

Per case of the example (``split``, ``fused``), each side in a fresh process (peak memory is per
process, and no side inherits another's imports or caches), in interleaved order:

* **floor**: the case built under ``FakeTensorMode`` and run through ``floor_run`` under that mode;
* **gate (meta)** / **gate (fake)**: ``compile-checks gate FILE:cases --analysis-only --json --jobs 1`` on
  a target holding that one case, built on ``meta`` / under ``FakeTensorMode``, as a user runs it.

Each side: the process's wall seconds (start to exit: imports, building the model, the run), its CPU
seconds (user + system: less sensitive to a busy machine than wall), and its peak resident set
(``wait4``'s ``ru_maxrss``). Reported per case: gate / floor for both, the verdict the gate gave (it must
be the example's: ``split`` clean, ``fused`` one copy of each block's V pool), and whether the goal holds
(gate <= 2x the floor, peak <= 1.5 GB). Results go to ``DIR/bench_production.json`` (``--out``, default
``reports/results``); the production-size guide's cost table is generated from it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "wan14b_meta"
CASES = ("split", "fused")
STORAGES = ("meta", "fake")
CONFIGS = ("WAN_14B", "WAN_SMALL")  # wan_dit's configurations: production size, and a quick smoke
GOAL_RATIO = 2.0  # the gate's seconds over the floor's, per case
GOAL_RSS = 1.5e9  # bytes of peak resident set
ONE_CASE = """\
import sys
sys.path.insert(0, {example!r})
import wan_dit
from cases import build_case


def cases():
    return [build_case({case!r}, layout={case!r}, storage={storage!r}, cfg=getattr(wan_dit, {cfg!r}))]
"""


# ---- the floor, in its own process -----------------------------------------------------------------


def floor_point(case_name: str, cfg: str) -> dict[str, Any]:
    """The case built under ``FakeTensorMode`` through plain ``torch.compile`` stopped after post-grad."""
    sys.path.insert(0, str(EXAMPLE))
    import wan_dit
    from cases import build_case  # the example's own builder

    from compile_checks.case.floor import floor_run

    case = build_case(case_name, layout=case_name, storage="fake", cfg=getattr(wan_dit, cfg))
    mode = next(iter(case.fn.parameters())).fake_mode
    with mode:  # the driver's own tensors (slots, timestep) are made under the case's mode, as the check does
        run = floor_run(case)
    return {"case_seconds": run.wall_seconds, "regions": len(run.region_seconds)}


# ---- one side, in a fresh process ------------------------------------------------------------------


def _measured(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run ``cmd``; its wall and CPU seconds, peak RSS, exit status and output."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {
            "wall_s": round(wall, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_bytes": usage.ru_maxrss * 1024,  # Linux: KiB
            "exit": proc.returncode,
            "timed_out": wall > timeout,
            "stdout": out.read(),
            "stderr_tail": err.read()[-2000:],
        }


def _env(cache: str) -> dict[str, str]:
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(ROOT)]  # the caller's first
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "TORCHINDUCTOR_CACHE_DIR": cache}


def run_floor(case: str, cfg: str, cache: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "reports.bench_production", "--point", case, "--config", cfg]
    got = _measured(cmd, ROOT, _env(cache), timeout)
    lines = [line for line in got.pop("stdout").splitlines() if line.startswith("{")]
    if got["exit"] != 0 or not lines:
        return {**got, "error": f"exit {got['exit']}: {got['stderr_tail'].strip().splitlines()[-1:]}"}
    got.pop("stderr_tail")
    return {**got, **json.loads(lines[-1])}


def run_gate(case: str, storage: str, cfg: str, cache: str, timeout: float, work: Path) -> dict[str, Any]:
    target = work / f"one_{storage}_{case}.py"
    target.write_text(ONE_CASE.format(example=str(EXAMPLE), case=case, storage=storage, cfg=cfg))
    cmd = [sys.executable, "-m", "compile_checks", "gate", f"{target.name}:cases"]
    cmd += ["--analysis-only", "--json", "--no-progress", "--jobs", "1"]
    got = _measured(cmd, work, _env(cache), timeout)
    try:
        (doc,) = json.loads(got.pop("stdout"))["cases"]
    except (json.JSONDecodeError, KeyError, ValueError):
        return {**got, "error": f"exit {got['exit']}, no JSON: {got['stderr_tail'].strip().splitlines()[-1:]}"}
    got.pop("stderr_tail")
    clones = doc.get("clones", [])
    return {
        **got,
        "case_seconds": float(doc["wall_seconds"]),
        "clean": bool(doc["clean"]),
        "passed": bool(doc["passed"]),
        "copies": len(clones),
        "copied_pools": sorted({c["pool"] for c in clones}),
    }


# ---- the run ---------------------------------------------------------------------------------------


def _expected(case: str, gate: dict[str, Any], layers: int) -> bool:
    """The example's verdict: ``split`` clean; ``fused`` one copy of each block's V pool."""
    if "error" in gate or not gate["passed"]:
        return False
    if case == "split":
        return gate["clean"] and gate["copies"] == 0
    return gate["copied_pools"] == sorted(f"layer{i}.v" for i in range(layers))


def measure(storages: Sequence[str], rounds: int, timeout: float, cfg: str = "WAN_14B") -> list[dict[str, Any]]:
    """One row per case: each side's median over ``rounds`` (interleaved: floor first, then last)."""
    sys.path.insert(0, str(EXAMPLE))
    import wan_dit

    layers = getattr(wan_dit, cfg).num_layers

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_production_") as tmp:
        cache, work = str(Path(tmp) / "inductor"), Path(tmp)
        for case in CASES:
            sides: dict[str, list[dict[str, Any]]] = {"floor": [], **{f"gate_{s}": [] for s in storages}}
            for r in range(rounds):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for side in order:
                    t0 = time.perf_counter()
                    got = (
                        run_floor(case, cfg, cache, timeout)
                        if side == "floor"
                        else run_gate(case, side.removeprefix("gate_"), cfg, cache, timeout, work)
                    )
                    sides[side].append(got)
                    print(
                        f"[bench_production] {case} round {r + 1}/{rounds} {side}: "
                        f"{got.get('error') or f'{time.perf_counter() - t0:.0f} s'}",
                        flush=True,
                    )
            rows.append(_row(case, sides, layers))
    return rows


def _median(samples: list[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in samples if "error" not in s]
    return round(statistics.median(values), 2) if values else None


def _row(case: str, sides: dict[str, list[dict[str, Any]]], layers: int) -> dict[str, Any]:
    row: dict[str, Any] = {"case": case}
    for side, samples in sides.items():
        row[side] = {k: _median(samples, k) for k in ("wall_s", "cpu_s", "case_seconds", "peak_rss_bytes")}
        errors = [s["error"] for s in samples if "error" in s]
        if errors:
            row[side]["errors"] = errors
        if side.startswith("gate_"):
            last = samples[-1]
            row[side]["verdict_expected"] = all(_expected(case, s, layers) for s in samples)
            row[side]["copies"] = last.get("copies")
            floor = row["floor"]
            for key in ("wall_s", "cpu_s"):
                g, f = row[side][key], floor[key]
                row[side][f"{key.removesuffix('_s')}_over_floor"] = round(g / f, 2) if g and f else None
            peak = row[side]["peak_rss_bytes"]
            row[side]["goal_met"] = bool(
                row[side]["verdict_expected"]
                and row[side]["wall_over_floor"] is not None
                and row[side]["wall_over_floor"] <= GOAL_RATIO
                and peak is not None
                and peak <= GOAL_RSS
            )
    return row


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as a Markdown table: one line per case and side."""
    out = [
        "| case | side | wall s | CPU s | peak RSS | wall / floor | CPU / floor | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for side, got in row.items():
            if side == "case":
                continue
            rss = got["peak_rss_bytes"]
            label = "floor (torch.compile, fake)" if side == "floor" else f"gate ({side.removeprefix('gate_')})"
            ratio = "" if side == "floor" else f"**{got['wall_over_floor']}x**"
            cpu_ratio = "" if side == "floor" else f"{got['cpu_over_floor']}x"
            verdict = "" if side == "floor" else ("as expected" if got["verdict_expected"] else "WRONG")
            rss_text = f"{rss / 1e6:.0f} MB" if rss else "error"
            out.append(
                f"| `{row['case']}` | {label} | {got['wall_s']} | {got['cpu_s']} | {rss_text} | {ratio} | "
                f"{cpu_ratio} | {verdict} |"
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.bench_production", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds per case (default 1)")
    parser.add_argument(
        "--storage", choices=STORAGES, action="append", help="the gate's builds to time (default: meta and fake)"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per process (default 1800)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "results", help="folder for the JSON")
    parser.add_argument(
        "--small", action="store_true", help="the example at a width real tensors fit (WAN_SMALL): a quick smoke"
    )
    parser.add_argument("--point", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--config", choices=CONFIGS, default=CONFIGS[0], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.point:  # a child: the floor of one case, its result as the last line of stdout
        print(json.dumps(floor_point(args.point, args.config)))
        return 0
    from reports.cli_args import out_dir, positive

    out_dir(parser, args.out)  # usage errors before the run, not after it
    positive(parser, "--rounds", args.rounds)
    positive(parser, "--timeout", args.timeout)
    from reports.bench_hotpath import machine_facts  # lazy: imports torch

    cfg = CONFIGS[1] if args.small else CONFIGS[0]
    rows = measure(args.storage or list(STORAGES), args.rounds, args.timeout, cfg)
    given = list(argv if argv is not None else sys.argv[1:])
    if "--out" in given:  # the command as it reproduces the committed results (the default --out)
        del given[given.index("--out") : given.index("--out") + 2]
    doc = {
        "command": " ".join(["python -m reports.bench_production", *given]),
        "machine": machine_facts(),
        "load_average": os.getloadavg(),
        "rounds": args.rounds,
        "config": cfg,
        "goal": {"wall_over_floor": GOAL_RATIO, "peak_rss_bytes": GOAL_RSS},
        "rows": rows,
    }
    path = args.out / "bench_production.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print("\n".join(table(rows)))
    print(f"wrote {path}")
    wrong = [r["case"] for r in rows for s, g in r.items() if s.startswith("gate_") and not g["verdict_expected"]]
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
