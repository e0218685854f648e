"""One rank's process: join the group, build this rank's case, run it through ``run_case``, write JSON.

Started by :mod:`compile_checks.ranks.launcher` as ``python -m compile_checks.ranks.worker JOB.json``
with its stdout and stderr in a log file (the launcher shows its tail when the rank fails).
Every outcome is a JSON file at ``job["result"]``: what the rank found, as plain data (the merge judges it), or
``{"error": ...}`` (and exit 1) when building or running the case raised. A rank that writes
nothing (killed, crashed in C++, hung) is the launcher's to report.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from compile_checks.case import Case, CaseResult, run_case
from compile_checks.ranks.spec import FactoryRef, RankedCaseError
from compile_checks.verdict import copy_fields
from compile_checks.vocab import RankStart


def rank_result(rank: int, result: CaseResult) -> dict[str, Any]:
    """One rank's :class:`CaseResult` as plain data: what it found; the merge judges it against the expectation."""
    report = result.report
    return {
        "rank": rank,
        "case": result.case.name,
        "clean": bool(report.clean),
        "problems": list(report.problems),
        "clones": [copy_fields(c) for c in report.clones],
        "other_clones": [copy_fields(c) for c in report.other_clones],
        "clone_bytes": report.clone_bytes,
        "clone_bytes_per_run": report.clone_bytes_per_run,
        "eager_match": result.eager_match,
        "max_abs_diff": result.max_abs_diff,
        "analysis_only": result.analysis_only,
        "compile_seconds": result.compile_seconds,
        "wall_seconds": result.wall_seconds,
        "notes": list(result.notes) + list(report.notes),
        "report": report.to_dict(),
    }


def _init_group(job: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    if job["backend"] == "nccl":
        torch.cuda.set_device(job["rank"] % torch.cuda.device_count())
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // job["world_size"]))
    dist.init_process_group(
        job["backend"],
        init_method=job["init_method"],
        rank=job["rank"],
        world_size=job["world_size"],
        timeout=timedelta(seconds=job["timeout_s"]),
    )
    if job["backend"] == "gloo":
        # gloo connects its full mesh inside init_process_group, and a rank can return from it while a peer is
        # still connecting: one that then fails fast (its factory raises) and exits broke the peer's init
        # ("connectFullMesh failed ... Connection closed by peer"), so the peer was reported for the wrong
        # reason (5 of 30 tries under load, with forked ranks). No rank goes on until every rank is connected.
        # (nccl connects lazily, at the first collective: nothing to wait for here.)
        dist.barrier()


def run_rank(job: dict[str, Any]) -> dict[str, Any]:
    """Build and run this rank's case (the process group is up); its result as plain data."""
    from compile_checks.pipelines.vllm_env import prepare_process_for_vllm

    prepare_process_for_vllm()  # before the factory can import vLLM: a CPU host resolves vLLM's CPU platform
    rank, world_size = job["rank"], job["world_size"]
    factory = FactoryRef(**job["factory"]).load()
    built = factory(rank, world_size)
    if not isinstance(built, Case):
        raise RankedCaseError(
            f"ranked case {job['name']!r}: {FactoryRef(**job['factory'])}({rank}, {world_size}) returned "
            f"{type(built).__name__}, not a Case"
        )
    # the ranked case declares the expectation and the pipeline once, for every rank
    case = built.replace(expect_clean=job["expect_clean"], pipeline=job["pipeline"])
    return rank_result(rank, run_case(case, analysis_only=job["analysis_only"], dump_dir=job["dump_dir"]))


def main(job_path: str, start: RankStart = RankStart.FRESH) -> int:
    """Run the job; ``start``: how this process began (a fresh interpreter, or forked from the preloaded server)."""
    job = json.loads(Path(job_path).read_text())
    import torch  # noqa: F401  (what a rank costs before it does anything: the interpreter, torch, this package)

    startup_seconds = time.time() - job["spawned_at"]
    started = time.perf_counter()
    try:
        _init_group(job)
        out = run_rank(job)
        code = 0
    except BaseException as e:  # SystemExit / KeyboardInterrupt from the case's code too: this rank's error
        out = {"rank": job["rank"], "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        traceback.print_exc()
        code = 1
    out.update(
        start=str(start),
        startup_seconds=startup_seconds,
        process_seconds=time.perf_counter() - started,
        ended_at=time.time(),  # its own clock: a rank that failed first is named first even if seen in one poll
    )
    Path(job["result"]).write_text(json.dumps(out, default=str))
    if code == 0:
        import torch.distributed as dist

        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
