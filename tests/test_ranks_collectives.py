"""Collectives on a pool, on 2 ranks under gloo, fully compiled: the verdict against Inductor's generated code.

Rank 0's ``dist.all_reduce(pool)`` stays out of place (the old value is read too), so Inductor lowers it
as a pool-sized buffer, the in-place collective on it, and a copy back: a ``collective_copy``. Rank 1's is
re-inplaced (``all_reduce_(pool)``): a write, no copy. The generated code of each rank is the truth.
"""

from __future__ import annotations

import re
from pathlib import Path

import _ranks_factories as factories
import pytest

from compile_checks.ranks import RankedCase, run_ranked
from compile_checks.vocab import CopyKind

pytestmark = pytest.mark.compile

POOL_BUFFER = re.compile(r"empty_strided_cpu\(\(64, 16\), \(16, 1\), torch\.float32\)")


def _generated_code(dump: Path) -> str:
    (kernel,) = dump.glob("__compiled_fn_*.kernel_0.py")
    return kernel.read_text()


def test_an_out_of_place_collective_on_a_pool_is_a_copy_and_a_reinplaced_one_is_not(tmp_path: Path) -> None:
    ranked = RankedCase("collective", factories.collective_on_pool, expect_clean_by_rank=(False, True), timeout_s=240)
    result = run_ranked(ranked, analysis_only=False, dump_dir=str(tmp_path))
    assert result.passed, "\n".join(result.errors or result.rank_failures)  # a str: pytest prints it whole
    (copy,) = result.copies()
    assert (copy["rank"], copy["kind"], copy["op"], copy["pool"]) == (
        0,
        CopyKind.COLLECTIVE_COPY,
        "_c10d_functional::all_reduce",
        "layer0.k",
    )
    assert copy["nbytes"] == 64 * 16 * 4
    assert result.differences and result.verdict.startswith("ranks differ: rank 0 1 clone(s) layer0.k 4096 B/call")
    # the truth: rank 0's generated code allocates a pool-sized buffer for the collective, rank 1's does not
    rank0, rank1 = _generated_code(tmp_path / "rank0"), _generated_code(tmp_path / "rank1")
    assert (tmp_path / "rank0.log").is_file() and (tmp_path / "rank1.log").is_file()  # each rank's whole log
    assert POOL_BUFFER.search(rank0) and "all_reduce_.default(buf" in rank0
    assert not POOL_BUFFER.search(rank1) and "all_reduce_.default(arg0_1" in rank1


def test_vllms_all_reduce_custom_op_in_the_graph_is_no_copy_and_hides_none(tmp_path: Path) -> None:
    """``torch.ops.vllm.all_reduce`` (vLLM's TP group on gloo, CPU communicator) in each rank's compiled graph:
    its output is no pool copy and it writes no pool (the undeclared-write check runs it); rank 1's
    gather-before-commit still shows its copy, so the ranks differ."""
    ranked = RankedCase("vllm_all_reduce", factories.vllm_all_reduce, expect_clean_by_rank=(True, False), timeout_s=240)
    result = run_ranked(ranked, analysis_only=True, dump_dir=str(tmp_path))
    assert result.passed, "\n".join(result.errors or result.rank_failures)  # a str: pytest prints it whole
    for rank in (0, 1):  # the custom op is in each rank's compiled graph, not a graph break
        (graph,) = (tmp_path / f"rank{rank}").glob("__compiled_fn_*.Forward_graph.0.py")
        assert "torch.ops.vllm.all_reduce.default(" in graph.read_text()
    (copy,) = result.copies()
    assert (copy["rank"], copy["op"], copy["kind"]) == (1, "aten::index_put", CopyKind.ATEN_WRITE_COPY)
    for rank in result.results.values():
        assert not rank["report"]["run_findings"] and rank["report"]["num_regions"] == 1
