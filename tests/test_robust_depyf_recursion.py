"""depyf's own RecursionError on a graph-break chain never breaks a check (issue 18.1, real reproducer).

depyf 0.20's exit builds one ``DynamoOptimizationResult`` per resume function a graph break leaves,
each inside the previous one (about 8 frames per break here): Self-Forcing's ``.item()`` reads make
such a chain, and around 120-300 sequential breaks exceed Python's default limit of 1000 frames.
Compiling that many graphs takes minutes, so the chain here is 12 real ``.item()`` breaks and the
recursion budget of depyf's exit is cut to 60 frames above its entry: the error is depyf's own,
raised by its real walk of this step's real resume functions, not an injected one. With the
default limit the same step dumps in full (the negative control: the failure is the chain's depth).
"""

from __future__ import annotations

import sys
from pathlib import Path

import depyf.explain.utils
import pytest
import torch
from _soundness_steps import commit_args, pools_fused

from compile_checks.api import analyze_pool_clones, format_report

pytestmark = pytest.mark.compile

BREAKS = 12
FRAMES_ABOVE_ENTRY = 60  # 12 breaks need ~100 frames; depyf's exit fails at 60


def _step_source(breaks: int) -> str:
    """A commit, then ``breaks`` sequential ``.item()`` reads (each a graph break, as Self-Forcing's)."""
    lines = [
        "def step(k, v, x, slots, window):",
        "    kw, vw = ar_paging.gather_window(k, v, window)",
        "    torch.ops.ar_paging.paged_write(k, v, x * 2, x + 1, slots)",
        "    out = kw.sum() + vw.sum()",
    ]
    for i in range(breaks):
        lines += [f"    end_{i} = k[slots].sum().item()", f"    out = out + end_{i}"]
    return "\n".join([*lines, "    return out", ""])


def _graph_break_chain():
    import ar_paging

    namespace = {"torch": torch, "ar_paging": ar_paging}
    exec(compile(_step_source(BREAKS), "<item_chain>", "exec"), namespace)  # the generated step (its own file name)
    return namespace["step"]


@pytest.fixture
def shallow_depyf_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """depyf's outermost result is built with only ``FRAMES_ABOVE_ENTRY`` frames of recursion budget."""
    original = depyf.explain.utils.DynamoOptimizationResult.__init__
    inside = []

    def limited(self, *args, **kwargs):
        if inside:  # a resume function's result, nested in its caller's: depyf's own recursion
            return original(self, *args, **kwargs)
        limit = sys.getrecursionlimit()
        depth = 0
        frame = sys._getframe()
        while frame is not None:
            depth, frame = depth + 1, frame.f_back
        inside.append(True)
        sys.setrecursionlimit(depth + FRAMES_ABOVE_ENTRY)
        try:
            return original(self, *args, **kwargs)
        finally:
            sys.setrecursionlimit(limit)
            inside.pop()

    monkeypatch.setattr(depyf.explain.utils.DynamoOptimizationResult, "__init__", limited)


# K and V are views of one allocation, and the breaks' k[slots] reads follow the commit: both cloned.
FUSED_COPIES = [("k_pool", "k"), ("v_pool", "v")]


def _copies(report) -> list[tuple[str, str | None]]:
    return sorted((c.arg, c.pool) for c in report.clones)


def _report(dump_dir: Path):
    k, v = pools_fused()
    return analyze_pool_clones(
        _graph_break_chain(), k, v, *commit_args(), pools={"k": k, "v": v}, dump_dir=dump_dir, analysis_only=True
    )


def test_depyfs_recursion_on_a_graph_break_chain_is_a_dump_failure_and_the_verdict_stands(
    tmp_path: Path, shallow_depyf_exit
) -> None:
    report = _report(tmp_path / "d")
    assert _copies(report) == FUSED_COPIES  # the real verdict
    assert len(report.dump_failures) == 1, report.dump_failures
    assert report.dump_failures[0].startswith("depyf failed writing its full_code_* files on exit: RecursionError")
    assert list((tmp_path / "d").glob("__compiled_fn_*.POST_GRAD.0.py"))  # the check's own files
    assert "dump failed (an artifact only: the verdict stands)" in format_report(report)
    assert report.unanalysed == []  # the breaks' no-op graphs are no blind spots


def test_with_the_default_limit_the_same_chain_dumps_in_full(tmp_path: Path) -> None:
    report = _report(tmp_path / "d")
    assert _copies(report) == FUSED_COPIES
    assert report.dump_failures == []
    assert list((tmp_path / "d").glob("full_code_for_*.py"))
