"""Per-rank checks: one case run in ``world_size`` processes under ``torch.distributed``, merged.

:class:`RankedCase` declares it (a factory ``make_case(rank, world_size) -> Case`` built in each
rank); :func:`run_ranked` runs it (each rank through ``run_case``) and merges the ranks'
reports into one :class:`RankedResult`.
"""

from __future__ import annotations

import time

from compile_checks.ranks.launcher import default_backend, launch
from compile_checks.ranks.merge import RankedResult
from compile_checks.ranks.spec import FactoryRef, RankedCase, RankedCaseError


def run_ranked(ranked: RankedCase, *, analysis_only: bool = False, dump_dir: str | None = None) -> RankedResult:
    """Run every rank of ``ranked`` (each: ``run_case`` on its own shard) and merge their results."""
    backend = ranked.backend or default_backend()
    started = time.perf_counter()
    runs = launch(ranked, backend=backend, analysis_only=analysis_only, dump_dir=dump_dir)
    return RankedResult(ranked, backend, runs, time.perf_counter() - started, analysis_only)


__all__ = ["FactoryRef", "RankedCase", "RankedCaseError", "RankedResult", "run_ranked"]
