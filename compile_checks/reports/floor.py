"""The check's compile cost against its floor, per compiled region, side by side.

Why: an analysis-only verdict costs dynamo + AOT + Inductor's post-grad passes; that is
the floor, what plain ``torch.compile`` pays before its C++ codegen. Whatever the check
adds on top (graph analysis, pool attribution, the lost-write reference run, explanations)
shows as the difference, region by region: for an engine compiled per block (vLLM-Omni's
DreamZero, ``examples/engine_blocks``) a per-region cost that grows with the regions is
the check's, not Inductor's.

The floor run is :func:`compile_checks.case.floor.floor_run` (plain ``torch.compile`` stopped after
the post-grad passes; ``compile-checks gate --floor`` runs it once per case beside the gate's own
compile); the check run is ``run_case(analysis_only=True)``. Both run
``rounds`` times, interleaved (floor, check, check, floor, ...) so machine noise hits
them alike; the table shows each region's median seconds (first compile of each region;
recompiles are regions of their own). ``python -m compile_checks.reports.floor TARGET``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from compile_checks.case.floor import FloorRun, check_run, floor_run


@dataclass
class FloorTable:
    """Median seconds per region, floor vs check, over interleaved rounds."""

    case: str
    floor: list[float]
    check: list[float]
    floor_wall: float
    check_wall: float

    def lines(self) -> list[str]:
        out = [f"{self.case}: per region, median s (floor = plain torch.compile stopped after post-grad)"]
        out.append(f"{'region':>6} {'floor':>8} {'check':>8} {'check/floor':>11}")
        for i in range(max(len(self.floor), len(self.check))):
            f = self.floor[i] if i < len(self.floor) else float("nan")
            c = self.check[i] if i < len(self.check) else float("nan")
            out.append(f"{i:>6} {f:>8.3f} {c:>8.3f} {c / f if f else float('nan'):>10.2f}x")
        total_f, total_c = sum(self.floor), sum(self.check)
        out.append(f"{'total':>6} {total_f:>8.3f} {total_c:>8.3f} {total_c / total_f if total_f else 0:>10.2f}x")
        out.append(
            f"{'wall':>6} {self.floor_wall:>8.3f} {self.check_wall:>8.3f} "
            f"{self.check_wall / self.floor_wall if self.floor_wall else 0:>10.2f}x  (the run: compiles + host loop"
            " + the check's eager reference)"
        )
        return out


def _medians(runs: Sequence[FloorRun]) -> tuple[list[float], float]:
    n = min(len(r.region_seconds) for r in runs)
    return [statistics.median(r.region_seconds[i] for r in runs) for i in range(n)], statistics.median(
        r.wall_seconds for r in runs
    )


def compare(load: Callable[[], Sequence[Any]], rounds: int = 3) -> list[FloorTable]:
    """Each case of ``load()`` (called again per run: fresh tensors), floor vs check, interleaved."""
    names = [c.name for c in load()]
    tables = []
    for i, name in enumerate(names):
        floors: list[FloorRun] = []
        checks: list[FloorRun] = []
        for r in range(rounds):
            order = (floor_run, check_run) if r % 2 == 0 else (check_run, floor_run)
            for fn in order:
                (floors if fn is floor_run else checks).append(fn(load()[i]))
        floor, floor_wall = _medians(floors)
        check, check_wall = _medians(checks)
        tables.append(FloorTable(name, floor, check, floor_wall, check_wall))
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    from compile_checks.gate.targets import load_target
    from compile_checks.pipelines.vllm_env import prepare_process_for_vllm

    parser = argparse.ArgumentParser(prog="python -m compile_checks.reports.floor", description=__doc__.split("\n")[0])
    parser.add_argument("target", help="file.py:NAME or pkg.mod:NAME (a Case, a list of Cases or a factory)")
    parser.add_argument("--case", action="append", default=[], help="only these case names (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    prepare_process_for_vllm()

    def load() -> list[Any]:
        cases = load_target(args.target, None)
        return [c for c in cases if not args.case or c.name in args.case]

    for table in compare(load, args.rounds):
        print("\n".join(table.lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["FloorRun", "FloorTable", "check_run", "compare", "floor_run"]
