"""The check's findings land in the structured trace beside their graph, and ``tlparse`` shows them.

A shared-storage commit (K and V as two views of one allocation) is compiled under the check while
torch's own structured-trace handler records (what ``TORCH_TRACE`` installs); ``tlparse`` (the PyPI
package, pinned in the locks) parses the log. The check's artifact must be in the folder of the
compile that made the graph, beside dynamo's graph of it, and name the V pool's copy and its bytes.
Negative controls: the same program compiled without the check (a trace with no artifact), and a
session with no trace handler (nothing logged, nothing built).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch._logging._internal import LazyTraceHandler, TorchLogsFormatter, trace_log

from compile_checks.api import analyze_pool_clones
from compile_checks.check.trace_artifacts import ARTIFACT, log_findings, recording


@torch.library.custom_op("cc_trace_artifacts::commit", mutates_args=("k", "v"))
def _commit(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> None:
    k[: x.shape[0]].copy_(x)
    v[: x.shape[0]].copy_(x)


@_commit.register_fake
def _(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> None:
    return None


def _step(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    _commit(k, v, x)
    return x + 1


def _fused() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    kv = torch.zeros(2, 64, 8)
    return kv[0], kv[1], torch.ones(4, 8)


def tlparse_binary() -> str | None:
    """The ``tlparse`` executable beside this interpreter (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "tlparse"
    return str(beside) if beside.exists() else shutil.which("tlparse")


def traced(folder: Path, run: Callable[[], Any]) -> Path:
    """Run ``run`` with torch's structured-trace handler writing into ``folder`` (as ``TORCH_TRACE`` does)."""
    handler = LazyTraceHandler(str(folder))
    handler.setFormatter(TorchLogsFormatter(trace=True))
    level = trace_log.level
    trace_log.setLevel(logging.DEBUG)
    trace_log.addHandler(handler)
    try:
        torch._dynamo.reset()
        run()
    finally:
        trace_log.removeHandler(handler)
        trace_log.setLevel(level)
        handler.close()
        torch._dynamo.reset()
    logs = sorted(folder.glob("*.log"))
    assert len(logs) == 1, logs
    return logs[0]


def tlparse_artifacts(log: Path, out: Path) -> dict[str, list[str]]:
    """``tlparse LOG``: compile id (``[0/0]``) -> the artifact files tlparse lists for that compile."""
    binary = tlparse_binary()
    if binary is None:
        try:  # installed (as the locks install it) but its executable is missing: a broken environment
            version = importlib.metadata.version("tlparse")
        except importlib.metadata.PackageNotFoundError:
            pytest.skip("the tlparse executable is not installed (pip install tlparse; the locks pin it)")
        pytest.fail(f"tlparse {version} is installed but its executable is not beside {sys.executable} nor on PATH")
    proc = subprocess.run([binary, str(log), "-o", str(out), "--no-browser"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    directory = json.loads((out / "compile_directory.json").read_text())
    return {cid: [a["url"] for a in entry["artifacts"]] for cid, entry in directory.items()}


@pytest.mark.compile
def test_tlparse_shows_the_surviving_copy_beside_its_graph(tmp_path: Path) -> None:
    k, v, x = _fused()
    reports = []
    log = traced(
        tmp_path / "trace",
        lambda: reports.append(analyze_pool_clones(_step, k, v, x, pools={"k": k, "v": v}, analysis_only=True)),
    )
    report = reports[0]
    assert [c.pool for c in report.clones] == ["v"], report.clones  # what the artifact must say
    by_compile = tlparse_artifacts(log, tmp_path / "tl")
    ours = {cid: [u for u in urls if Path(u).name.startswith(ARTIFACT)] for cid, urls in by_compile.items()}
    ours = {cid: urls for cid, urls in ours.items() if urls}
    assert list(ours) == ["[0/0]"], by_compile
    # beside the graph it belongs to: the same compile's folder holds dynamo's graph of it
    assert any("dynamo_output_graph" in u for u in by_compile["[0/0]"]), by_compile["[0/0]"]
    payload = json.loads((tmp_path / "tl" / ours["[0/0]"][0]).read_text())
    assert payload["region"] == 0 and payload["calls"] == 1 and payload["clean"] is False
    assert [(c["pool"], c["arg"], c["nbytes"]) for c in payload["copies"]] == [
        (c.pool, c.arg, c.nbytes) for c in report.clones
    ]
    assert payload["bytes_per_call"] == report.clone_bytes > 0
    assert payload["copies"][0]["explanation"]["cause"] == "shared_storage"


@pytest.mark.compile
def test_a_compile_without_the_check_has_no_artifact(tmp_path: Path) -> None:
    """Negative control: the same program, compiled without the check, traced and parsed the same way."""
    k, v, x = _fused()
    log = traced(tmp_path / "trace", lambda: torch.compile(_step, backend="aot_eager")(k, v, x))
    by_compile = tlparse_artifacts(log, tmp_path / "tl")
    assert any("dynamo_output_graph" in u for urls in by_compile.values() for u in urls), by_compile  # a real trace
    assert not [u for urls in by_compile.values() for u in urls if ARTIFACT in u], by_compile


def test_nothing_is_logged_or_built_without_a_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: with no trace handler the payload is never built (no cost outside tracing)."""
    from compile_checks.check import trace_artifacts
    from compile_checks.check.findings import CloneReport

    if recording():
        pytest.skip("a structured trace is being recorded in this process (TORCH_TRACE set)")
    monkeypatch.setattr(trace_artifacts, "region_payload", lambda *a: pytest.fail("payload built without a trace"))
    region = type("R", (), {"index": 0, "compiled_fn_name": "f", "trace_id": None})()
    assert log_findings(CloneReport(num_regions=1), [region]) == 0
