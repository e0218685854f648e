"""The scan agrees with the live check: same verdict, copies and bytes, on traces torch wrote itself.

One session fixture runs ``tests/_scan_traces.py``'s ``produce`` in its pytest worker: each case is compiled fully
under the live check (a production compile: the analysis-only gate stops before Inductor logs its
post-grad graph) with torch's structured-trace handler on, and the live verdict is saved beside
the trace. The scan then reads only the trace. Negative controls (cases that must keep copying)
are in the set, so a scan that found nothing would fail them.

The default set is small (full compiles on CPU cost ~15-40 s each); ``COMPILE_CHECKS_SCAN_ALL=1``
runs every built-in scenario and the example engine under both pipelines, and a negative control
compiled with ``dynamic=True`` (its bytes are expressions of the symbolic sizes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _checks import session_folder, shared_truth

from compile_checks.cli import main
from compile_checks.scan.command import scan_paths
from compile_checks.scan.inputs import PoolMap
from compile_checks.vocab import ExitCode

pytestmark = pytest.mark.compile

# Each spec's C++ kernels are built once in the session (the kernel store): the two engine specs share
# one pipeline, so one graph's kernels serve both but the commit's; the two scenarios compile as their
# generated-code truths do (_checks.COMMIT_GRAPH_ONLY, stock), so they build nothing new either.
DEFAULT = (
    "engine:fused:vllm",  # negative control: v1 clones of two views of one storage, of different sizes
    "engine:split:vllm",
    "scenario:index_put_commit:stock",  # negative control: ATen writes kept functional
    "scenario:attn_op_commit_after:stock",  # negative control: a v2 clone (the reads sunk below the commit)
    "newcomer:paged_lm:stock",  # negative control: writes through views of one (L, 2, ...) buffer, one copy each
)
NO_POST_GRAD = "analysis:split:stock"  # analysis-only: the trace holds no post-grad graph


def _all_specs() -> tuple[str, ...]:
    from compile_checks.scenarios import SCENARIOS

    engine = tuple(f"engine:{n}:{p}" for p in ("stock", "vllm") for n in ("split", "fused"))
    engine += ("newcomer:paged_lm:stock", "newcomer:paged_lm:vllm")
    # a negative control with symbolic sizes (dynamic fused is no control: the live check finds a lost_write there)
    dynamic = ("dynamic:index_put_commit:stock",)
    return engine + tuple(f"scenario:{n}:{p}" for n in SCENARIOS for p in ("stock", "vllm")) + dynamic


SPECS = _all_specs() if os.environ.get("COMPILE_CHECKS_SCAN_ALL") == "1" else DEFAULT


@pytest.fixture(scope="session")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The traces, produced once per test session even under pytest-xdist (``_checks.shared_truth``: the
    first worker to ask produces them in the session's shared folder, another waits on its lock)."""
    out = session_folder(tmp_path_factory, "scan_traces")

    def produce_traces() -> list[str]:
        from _scan_traces import produce  # in this worker: torch, vLLM and the checker are imported already

        produce(out, [*SPECS, NO_POST_GRAD])
        return list(SPECS)

    shared_truth(out, "produced", produce_traces)
    return out


def live_and_scanned(out: Path, spec: str) -> tuple[dict, dict]:
    """The live verdict and the scan's, both as {clean, copies: sorted (node, op, arg, nbytes, kind)}."""
    name = spec.replace(":", "-")
    live = json.loads((out / f"{name}.live.json").read_text())
    scans = scan_paths([out / name], PoolMap({}))
    errors = [s.error for s in scans if s.error] + [p for s in scans for p in s.problems]
    copies = sorted({(c["node"], c["op"], c["arg"], c["nbytes"], str(c["kind"])) for s in scans for c in s.copies})
    scanned = {"clean": not copies, "copies": [list(c) for c in copies], "errors": errors, "graphs": len(scans)}
    return live, scanned


@pytest.mark.parametrize("spec", SPECS)
def test_scan_agrees_with_live_check(traces: Path, spec: str) -> None:
    live, scanned = live_and_scanned(traces, spec)
    assert not live["problems"], live
    assert scanned["errors"] == []
    if spec.startswith("dynamic:"):  # symbolic sizes: the scan's bytes are expressions, the live check's a call's
        assert all(isinstance(c[3], str) and "s" in c[3] for c in scanned["copies"]), scanned
        assert [c[:3] + c[4:] for c in scanned["copies"]] == [c[:3] + c[4:] for c in live["copies"]]
    else:
        assert scanned["copies"] == live["copies"]  # node, op, argument, bytes, kind of every copy
    assert scanned["clean"] == live["clean"] == live["expect_clean"]  # negative controls still copy


def scanned_causes(out: Path, spec: str) -> dict[str, str]:
    """The scan's cause of each copy (by its clone node): the word its explanation starts with."""
    scans = scan_paths([out / spec.replace(":", "-")], PoolMap({}))
    return {c["node"]: c["explanation"].split(":", 1)[0] for s in scans for c in s.copies}


def cause_mismatches(live: dict[str, str | None], scanned: dict[str, str]) -> list[str]:
    """Every copy the two commands give different causes (or that only one of them finds)."""
    return [
        f"{node}: gate {live.get(node)!r}, scan {scanned.get(node)!r}"
        for node in sorted(set(live) | set(scanned))
        if live.get(node) != scanned.get(node)
    ]


@pytest.mark.parametrize("spec", [s for s in SPECS if not s.endswith(":split:vllm")])
def test_one_cause_per_copy(traces: Path, spec: str) -> None:
    """The gate (the live check's explanation) and the scan of the same compile's trace give each copy one cause.
    The specs are negative controls: each has copies, so an empty comparison cannot pass."""
    live = json.loads((traces / f"{spec.replace(':', '-')}.live.json").read_text())["causes"]
    scanned = scanned_causes(traces, spec)
    assert live and scanned, (live, scanned)
    assert cause_mismatches(live, scanned) == []


def test_newcomer_copies_are_writes_through_views(traces: Path) -> None:
    """The newcomer's model: every copy is a write through a view of the one buffer, scattered back into it
    (``view_not_written_back``), in both commands; never ``shared_storage`` (its K and V are never two
    arguments of one call) nor ``other``.

    Five copies, as Inductor's generated code (plain ``torch.compile``, caches off) allocates them: a 1024-byte
    buffer per ``index_put`` (``buf1``, ``buf3``, ``buf15``, ``buf18``) and one 4096-byte buffer of the whole pool,
    ``buf17``, computed from ``select_scatter_default_5`` (the scatters ``_1`` and ``_3`` inlined into it); the last
    scatter, ``select_scatter_default_7``, is computed inside the write-back's kernel, straight into the input."""
    spec = "newcomer:paged_lm:stock"
    live = json.loads((traces / f"{spec.replace(':', '-')}.live.json").read_text())["causes"]
    assert sorted(live) == ["index_put", "index_put_1", "index_put_2", "index_put_3", "select_scatter_default_5"], live
    assert set(live.values()) == {"view_not_written_back"}, live
    assert set(scanned_causes(traces, spec).values()) == {"view_not_written_back"}


def test_cause_comparison_catches_a_planted_mismatch(traces: Path) -> None:
    """The comparison's negative control: the newcomer's model with one scanned cause changed, and one copy
    dropped, must not compare equal."""
    spec = "newcomer:paged_lm:stock"
    live = json.loads((traces / f"{spec.replace(':', '-')}.live.json").read_text())["causes"]
    scanned = scanned_causes(traces, spec)
    first, *rest = sorted(scanned)
    planted = {**scanned, first: "shared_storage" if scanned[first] != "shared_storage" else "other"}
    assert [m.split(":")[0] for m in cause_mismatches(live, planted)] == [first]
    assert cause_mismatches(live, {n: scanned[n] for n in rest}) == [f"{first}: gate {live[first]!r}, scan None"]


def test_analysis_only_trace_is_an_error(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(traces / NO_POST_GRAD.replace(":", "-"))]) == ExitCode.COMPILE
    assert "no post-grad graph" in capsys.readouterr().out


def test_truncated_real_trace_is_an_error(traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [log] = (traces / "engine-fused-vllm").glob("*.log")
    text = log.read_text()
    cut = text.index("inductor_post_grad_graph") + 2000  # inside the post-grad graph's payload
    (tmp_path / log.name).write_text(text[:cut])
    assert main(["scan", str(tmp_path)]) == ExitCode.USAGE
    assert "does not match its logged hash" in capsys.readouterr().err
