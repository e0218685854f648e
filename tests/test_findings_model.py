"""The findings model: every finder's record, the verdict computed once from them, torch-free."""

from __future__ import annotations

import subprocess
import sys

from compile_checks.findings import Evidence, Finding, Verdict, collect_findings, finders, finding_lines, verdict_of
from compile_checks.findings.registry import register_finder
from compile_checks.vocab import FinderSource, FindingKind


def _copy(pool: str = "layer0.k", nbytes: int = 64, **kw: object) -> dict[str, object]:
    return {"op": "ar::w", "arg": "k", "pool": pool, "nbytes": nbytes, "kind": "functionalization_clone", **kw}


def _lost(pool: str) -> dict[str, object]:
    return {
        "kind": "lost_write",
        "pool": pool,
        "op": "mla::write",
        "message": f"pool {pool!r}: rows differ",
        "fails": True,
    }


def test_every_finder_family_is_registered() -> None:
    collect_findings(Evidence())  # imports the finders
    names = {f.name for f in finders()}
    assert {"copies", "undecided", "pools_not_received", "run_findings", "eager_mismatch", "notes", "ranks"} <= names
    assert {f.source for f in finders()} >= {FinderSource.GRAPH, FinderSource.RUN}


def test_lost_write_fails_a_clean_case_with_cause_and_fix() -> None:
    v = verdict_of(Evidence(report={"run_findings": [_lost("layer0.latent"), _lost("layer0.rope")]}), expect_clean=True)
    assert v.clean and not v.verdict_met and not v.passed
    assert [f.kind for f in v.failing] == [FindingKind.LOST_WRITE] * 2 and not v.undecided
    lines = finding_lines(v.failing)
    # each on its own line, the shared cause and fix said once, after them; never "could not decide"
    assert lines[0].startswith("lost_write: pool 'layer0.latent'") and lines[1].startswith(
        "lost_write: pool 'layer0.rope'"
    )
    assert "dead code" in lines[2] and "mutates_args" in lines[3] and len(lines) == 4
    assert not any("could not decide" in line for line in lines)


def test_copies_count_and_a_negative_control_passes() -> None:
    e = Evidence(copies=[_copy(calls=3, cause="shared_storage", fix="split")])
    (f,) = collect_findings(e)
    assert f.is_copy and f.bytes_per_run == 192 and f.layers == (0,) and f.cause == "shared_storage"
    assert verdict_of(e, expect_clean=False).passed and not verdict_of(e, expect_clean=True).passed


def test_eager_mismatch_fails_but_meets_the_verdict() -> None:
    v = verdict_of(Evidence(eager_match=False, max_abs_diff=0.5), expect_clean=True)
    assert v.verdict_met and not v.passed and finding_lines(v.failing) == ["compiled != eager (max relative diff 0.5)"]


def test_unanalysed_fails_unless_allowed_and_unreceived_pool_is_said_once() -> None:
    report = {
        "unanalysed": ["region 0: a backward graph"],
        "unreceived_pools": ["layer1.v"],
        "errors": ["named pool 'layer1.v' was never received by any compiled region (a stale tensor?)"],
    }
    v = verdict_of(Evidence(report=report), expect_clean=True)
    assert sorted(str(f.kind) for f in v.undecided) == ["pool_not_received", "undecided"]
    assert verdict_of(Evidence(report={**report, "allow_unanalysed": True}), expect_clean=True).undecided[0].kind == (
        FindingKind.POOL_NOT_RECEIVED
    )


def test_a_kind_this_version_does_not_know_still_fails() -> None:
    unknown = {"kind": "some_future_kind", "message": "m", "fails": True}
    v = verdict_of(Evidence(report={"run_findings": [unknown]}), expect_clean=True)
    assert not v.passed and finding_lines(v.failing) == ["some_future_kind: m"]
    note = verdict_of(Evidence(report={"run_findings": [{**unknown, "fails": False}]}), expect_clean=True)
    assert note.passed and note.notes[0].kind == FindingKind.NOTE


def test_ranks_findings_are_tagged() -> None:
    report = {"ranks": {"1": {"report": {"run_findings": [_lost("layer0.k")]}}}}
    (f,) = collect_findings(Evidence(report=report))
    assert f.kind == FindingKind.LOST_WRITE and f.details["rank"] == 1 and f.message.startswith("rank 1: ")


def test_a_finding_round_trips_through_json() -> None:
    f = collect_findings(Evidence(copies=[_copy(shape=[4, 8])]))[0]
    assert Finding.from_dict(f.to_dict()) == f
    assert Verdict.of([f], expect_clean=True).to_dict()["failing"] == []


def test_a_new_finder_is_one_registration() -> None:
    @register_finder("test_only_program_copy", FinderSource.TRACE)
    def _find(e: Evidence) -> list[Finding]:
        return [Finding(FindingKind.PROGRAM_COPY, "a roll", fails=False)] if e.report.get("roll") else []

    try:
        assert [f.kind for f in collect_findings(Evidence(report={"roll": 1}))] == [FindingKind.PROGRAM_COPY]
    finally:
        from compile_checks.findings import registry

        del registry._FINDERS["test_only_program_copy"]


def test_the_findings_model_imports_no_torch() -> None:
    code = "import sys, compile_checks.findings as f; f.collect_findings(f.Evidence()); print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_scan_and_table_cells_render_the_verdict_not_the_raw_findings() -> None:
    """A finding that does not fail (a scan's or a newer producer's note-like finding) leaves the verdict cell
    clean and the row passing; before the findings model the scan's cell showed every finding's kind in red
    on a passing row. A failing one fails the row and names its kind, said once."""
    from compile_checks.gate.outcome import Outcome
    from compile_checks.gate.outputs import _verdict as gate_cell
    from compile_checks.scan.command import _verdict as scan_cell
    from compile_checks.vocab import Pipeline

    quiet = {"kind": "cache_aliasing", "message": "served for other aliasing, same copies", "fails": False}
    o = Outcome("g", "scan:x", Pipeline.STOCK, True, False, clean=True, report={"run_findings": [quiet]})
    assert o.passed and scan_cell(o) == "clean" and gate_cell(o) == "clean"
    o.report["run_findings"] = [{**quiet, "fails": True}]
    assert not o.passed and "cache_aliasing" in scan_cell(o) and "cache_aliasing" in gate_cell(o)
    assert o.failure_reasons() == ["cache_aliasing: served for other aliasing, same copies"]


def test_a_lost_write_by_an_aten_op_is_no_missing_declaration() -> None:
    aten = {"kind": "lost_write", "pool": "cache", "op": "aten::index_copy", "message": "m", "fails": True}
    (f,) = collect_findings(Evidence(report={"run_findings": [aten]}))
    assert "miscompile" in (f.cause or "") and "mutates_args" not in (f.fix or "") and "repro" in (f.fix or "")
