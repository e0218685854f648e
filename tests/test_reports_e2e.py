"""Real, small reports end to end: built-in split/fused and a user's own cases (--target)."""

from __future__ import annotations

import types
from pathlib import Path

import pandas as pd
import pytest

from compile_checks.cli import main
from compile_checks.reports.outputs import OUTPUT_FILES

CASES = str(Path(__file__).parent / "report_cases" / "paged_step.py") + ":cases"
LOST_WRITE = str(Path(__file__).parent / "report_cases" / "lost_write.py") + ":cases"


@pytest.mark.compile
def test_small_report_fused_has_clones_split_has_none(tmp_path, capsys) -> None:
    out = tmp_path / "report"
    baseline = tmp_path / "baseline.json"
    rc = main(
        [
            "report",
            "--out",
            str(out),
            "--scenario",
            "split",
            "--scenario",
            "fused",
            "--no-progress",
            "--write-baseline",
            str(baseline),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    for name in OUTPUT_FILES:
        assert (out / name).stat().st_size > 0, name
    df = pd.read_csv(out / "traffic.csv").set_index("case")
    assert list(df.index) == ["split", "fused"]
    split, fused = df.loc["split"], df.loc["fused"]
    assert split["surviving_clones"] == 0 and split["extra_bytes_per_step"] == 0
    assert fused["surviving_clones"] > 0
    # fused: the clone copies both pools of a layer, the copy-back one: extra = 1.5 x the clone alone
    assert fused["extra_bytes_per_step"] == pytest.approx(1.5 * fused["clone_bytes_per_step"])
    assert fused["ideal_bytes_per_step"] == split["ideal_bytes_per_step"] > 0
    assert set(df["ideal_video_method"]) == {"window model"}
    nodes = pd.read_csv(out / "traffic_nodes.csv")
    assert set(nodes["cost"]) == {"clone", "copy_back"} and set(nodes["case"]) == {"fused"}
    # one copy node, one clone and one copy-back row per pool it received, each charged only its own calls
    assert nodes["node"].nunique() == 1 and len(nodes) == 2 * nodes["pool"].nunique()
    assert nodes["bytes_per_run"].sum() / df.loc["fused", "num_steps"] == pytest.approx(fused["extra_bytes_per_step"])
    md = (out / "traffic.md").read_text()
    assert "fused: expected clones" in md and "split: clean" in md
    from compile_checks.reports.baseline import load_baseline

    written = load_baseline(baseline)
    assert written["fused"].extra_bytes_per_step == pytest.approx(fused["extra_bytes_per_step"])


@pytest.mark.compile
def test_user_cases_get_their_ideal_from_the_graph(tmp_path, capsys) -> None:
    out = tmp_path / "report"
    rc = main(["report", CASES, "--out", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    df = pd.read_csv(out / "traffic.csv").set_index("case")
    assert list(df.index) == ["my_split", "my_fused"]  # targets only: no built-in scenario
    # window of 8 slots, chunk of 4 tokens, 2 heads x 8 fp32: K+V read 2*8*64 B, K+V written 2*4*64 B
    for name in ("my_split", "my_fused"):
        assert df.loc[name, "ideal_bytes_per_step"] == 2 * 8 * 64 + 2 * 4 * 64
        assert df.loc[name, "ideal_source"].startswith("graph, one per model")  # the two layouts of `step`
    # the fused case's copy-back is extra, not ideal: the same ideal as split (negative control of
    # the copy_ rule), and extra = clone of the 2-pool storage (2 x 8 KiB) + copy-back of one (2 x 4 KiB)
    assert df.loc["my_split", "extra_bytes_per_step"] == 0
    assert df.loc["my_fused", "extra_bytes_per_step"] == 2 * 8192 + 2 * 4096
    assert list(df["status"]) == ["clean", "expected clones"]
    assert "extra_bytes_per_video" not in df.columns  # no steps_per_chunk in meta: no case has one


@pytest.mark.compile
def test_a_lost_write_is_a_failed_row_and_never_the_models_ideal(tmp_path, capsys) -> None:
    """The report runs the gate's write check: the layout whose commit op AOT drops (undeclared mutation) is the
    gate's ``lost_write``, not "clean, traffic = ideal", and its graph (no write) never becomes the model's ideal,
    which would shrink every layout's ideal and inflate the fused layout's ratio (17x -> 25x here)."""
    out = tmp_path / "report"
    assert main(["report", LOST_WRITE, "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    df = pd.read_csv(out / "traffic.csv").set_index("case")
    assert list(df["status"]) == ["clean", "expected clones", "FAILED"]
    assert "lost_write on pools k, v" in df.loc["lw_lost", "verdict"]
    # window of 8 slots read, chunk of 4 tokens written (K and V, 2 heads x 8 fp32 = 64 B a token)
    assert set(df["ideal_bytes_per_step"]) == {2 * 8 * 64 + 2 * 4 * 64}
    assert set(df["ideal_source"]) == {"graph, one per model (least of its 3 cases: lw_split)"}
    assert df.loc["lw_fused", "traffic_ratio"] == pytest.approx((1536 + 24576) / 1536)


@pytest.mark.compile
def test_case_ideal_and_measured_ms(tmp_path, capsys, monkeypatch) -> None:
    from compile_checks.gate.targets import load_targets

    cases = load_targets([CASES])
    cases = [c.replace(ideal_bytes_per_call=1000) for c in cases[:1]]  # one full compile: keep it short
    mod = types.ModuleType("user_cases_for_test")
    mod.CASES = cases  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, "user_cases_for_test", mod)
    out = tmp_path / "report"
    rc = main(
        [
            "report",
            "--out",
            str(out),
            "--target",
            "user_cases_for_test:CASES",
            "--no-progress",
            "--measure",
            "--rounds",
            "3",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    df = pd.read_csv(out / "traffic.csv").set_index("case")
    assert list(df["ideal_bytes_per_step"]) == [1000] and set(df["ideal_source"]) == {"case"}
    assert all(0 < ms < 10_000 for ms in df["ms_per_step"])


def test_measure_compiles_as_the_case_says() -> None:
    """``--measure`` compiles with the case's own ``Case.compile`` (an engine compiled per block), under
    the pipeline's Inductor settings, as ``run_case`` does (it used plain ``torch.compile(case.fn)``)."""
    import torch._inductor.config as inductor_config

    from compile_checks.case import Case
    from compile_checks.reports.measure import prepare

    seen: list[tuple[str, bool]] = []
    calls: list[int] = []

    def engine_compile(backend: str) -> None:
        seen.append((backend, inductor_config.force_disable_caches))  # compiles its blocks in place

    case = Case(name="blocks", fn=lambda: calls.append(1), compile=engine_compile, check_writes=False)
    timed = prepare(case)
    assert seen == [("inductor", True)] and calls == [1] and timed.steps == 1
