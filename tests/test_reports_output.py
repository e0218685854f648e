"""The report for any set of cases: the gate's pipelines (said, never silently stock), the CSV's ``case``
column without all-NaN columns and with integer counts, a plot that reads at one pool size, a line per
case in a CI log, and :func:`compile_checks.reports.frame.traffic_frame`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from test_reports_cli import ROOT, _fake_registry, report

from compile_checks.check.findings import CloneReport
from compile_checks.reports import run as report_run
from compile_checks.reports.plot import traffic_panels
from compile_checks.reports.traffic import INTEGER_COLUMNS, tidy_table, traffic_table

CASES = str(ROOT / "tests" / "report_cases" / "paged_step.py") + ":cases"


def _fake_run_case(seen: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    """run_case without a compile: records (label, pipeline), one call of the compiled step."""
    from compile_checks.case import CaseResult

    def fake(case, *, analysis_only=False, dump_dir=None):  # type: ignore[no-untyped-def]
        seen.append((case.name, str(case.pipeline)))
        output = case.driver(lambda *args, **kwargs: None)
        report = CloneReport(num_regions=1, region_calls={0: 1})
        return CaseResult(case=case, report=report, output=output, analysis_only=analysis_only)

    return fake


def test_the_report_runs_the_gates_pipelines_and_says_where_they_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _fake_registry(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.compile_checks]\npipelines = ["stock", "vllm"]\n')
    assert report(["--out", str(tmp_path / "a"), "--no-progress", "--scenario", "split"]) == 0
    assert runs == {"split": 1, "split[vllm]": 1}
    assert "report: pipelines stock, vllm ([tool.compile_checks] pipelines)" in capsys.readouterr().out
    df = pd.read_csv(tmp_path / "a" / "traffic.csv")
    assert list(zip(df["case"], df["pipeline"])) == [("split", "stock"), ("split[vllm]", "vllm")]
    # --pipeline over the table; and the negative control: no table, no option -> each case's own, said so
    assert report(["--out", str(tmp_path / "b"), "--no-progress", "--scenario", "fused", "--pipeline", "vllm"]) == 0
    assert "fused[vllm]" in runs and "fused" not in runs
    (tmp_path / "pyproject.toml").unlink()
    assert report(["--out", str(tmp_path / "c"), "--no-progress", "--scenario", "fused"]) == 0
    assert runs["fused"] == 1 and "pipelines - (each case's own" in capsys.readouterr().out


def test_the_csv_names_the_case_drops_empty_columns_and_writes_counts_as_ints(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(report_run, "run_case", _fake_run_case(seen))
    assert report([CASES, "--out", str(tmp_path), "--no-progress", "--pipeline", "stock"]) == 0
    text = (tmp_path / "traffic.csv").read_text()
    df = pd.read_csv(tmp_path / "traffic.csv")
    assert df.columns[0] == "case" and "scenario" not in df.columns
    assert not [c for c in df.columns if df[c].isna().all()]  # no column a user's case leaves empty
    assert "num_layers" not in df.columns and "chunk_size" not in df.columns
    assert str(df["num_steps"].dtype) == "int64" and ",1.0," not in text


def test_tidy_table_is_what_makes_the_difference() -> None:
    """The negative control of the CSV test: the raw table has the all-NaN and float columns tidy_table removes."""
    from test_reports_traffic import FakeResult, FakeScenario

    from compile_checks.reports.traffic import traffic_row

    raw = traffic_table([traffic_row(FakeResult(FakeScenario(), CloneReport(num_regions=1)))])
    assert raw["ms_per_step"].isna().all() and raw["num_layers"].dtype == float
    tidy = tidy_table(raw)
    assert "ms_per_step" not in tidy.columns and "ms_per_step" in raw.columns
    assert all(str(tidy[c].dtype) == "Int64" for c in INTEGER_COLUMNS if c in tidy.columns)
    assert tidy["num_layers"].tolist() == [2]


def test_the_plot_draws_lines_only_for_a_variant_at_several_pool_sizes() -> None:
    def row(case: str, layout: str, pool: int) -> dict[str, object]:
        return {
            "case": case,
            "layout": layout,
            "functionalization": "v2",
            "dtype": "float32",
            "pipeline": "stock",
            "pool_bytes": pool,
        }

    users = pd.DataFrame([row("mine", "", 1 << 20), row("mine[vllm]", "", 1 << 20), row("other", "", 1 << 20)])
    users.loc[1, "pipeline"] = "vllm"
    lines, bars = traffic_panels(users)
    assert lines.empty and list(bars["case"]) == ["mine", "mine[vllm]", "other"]  # one bar per case and pipeline
    sizes = pd.DataFrame([row("fused", "fused", 1 << 20), row("fused_pool64MiB", "fused", 64 << 20)])
    lines, bars = traffic_panels(pd.concat([sizes, users], ignore_index=True))
    assert list(lines["case"]) == ["fused", "fused_pool64MiB"] and len(bars) == 3  # the control: several sizes


def test_off_a_terminal_the_report_prints_a_line_per_case_and_no_bar(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_registry(monkeypatch)
    assert report(["--out", str(tmp_path / "a"), "--scenario", "split", "--scenario", "fused"]) == 0
    err = capsys.readouterr().err
    assert "report [1/2] split " in err and "report [2/2] fused " in err and "\r" not in err
    assert report(["--out", str(tmp_path / "b"), "--scenario", "split", "--no-progress"]) == 0
    assert "report [" not in capsys.readouterr().err  # the negative control: --no-progress prints none


def test_traffic_frame_returns_the_csvs_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from compile_checks.reports.frame import traffic_frame

    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(report_run, "run_case", _fake_run_case(seen))
    df = traffic_frame([CASES], pipelines=["stock", "vllm"], base_dir=tmp_path)
    assert list(df["case"]) == ["my_split", "my_fused", "my_split[vllm]", "my_fused[vllm]"]
    assert seen == [
        ("my_split", "stock"),
        ("my_fused", "stock"),
        ("my_split[vllm]", "vllm"),
        ("my_fused[vllm]", "vllm"),
    ]
    assert list(df["expect_clean"]) == [True, False, True, False]
    assert not [c for c in df.columns if df[c].isna().all()]


def test_the_plot_labels_its_axes_in_the_unit_the_values_reach() -> None:
    """A 1 KiB ideal and a 48 KiB extra are read in KiB, not as 0.001 / 0.047 MiB; a 96 MiB one in MiB (the
    control), and the pool-size axis of a line pair likewise."""
    import matplotlib.pyplot as plt

    from compile_checks.reports import plot

    assert plot.byte_unit([1024.0, 49152.0]) == ("KiB", 1024)
    assert plot.byte_unit([float("nan"), 96 << 20]) == ("MiB", 1 << 20)
    assert plot.byte_unit([]) == ("B", 1) and plot.byte_unit([3 << 30]) == ("GiB", 1 << 30)

    def frame(ideal: float, extra: float, pools: tuple[int, ...] = (16 << 10,)) -> pd.DataFrame:
        rows = [
            {"case": f"c{i}", "layout": "fused", "functionalization": "v2", "dtype": "float32", "pipeline": "stock"}
            | {"pool_bytes": p, "ideal_bytes_per_step": ideal, "extra_bytes_per_step": extra}
            for i, p in enumerate(pools)
        ]
        return pd.DataFrame(rows)

    labels = []
    for df in (frame(1024.0, 49152.0), frame(1024.0, 96 << 20)):
        fig, ax = plt.subplots()
        plot._bars(ax, df)
        labels.append(ax.get_ylabel())
        top = max(bar.get_y() + bar.get_height() for bar in ax.patches)
        plt.close(fig)
        assert 1 <= top < 1024, (labels[-1], top)  # the tallest bar reads between 1 and 1024 of its unit
    assert "(KiB," in labels[0] and "(MiB," in labels[1], labels
    fig, ax = plt.subplots()
    plot._lines(ax, frame(1024.0, 4096.0, pools=(16 << 10, 64 << 10)), pd.Series(["fused", "fused"]))
    assert ax.get_xlabel().endswith("(KiB)") and "(KiB," in ax.get_ylabel(), (ax.get_xlabel(), ax.get_ylabel())
    assert sorted(ax.get_xticks()) == [16, 64]
    plt.close(fig)


def test_one_ideal_per_model_the_least_of_its_layouts() -> None:
    """The fused layout's own graph reads its copies too: its derived ideal (here 3x) is replaced by the model's
    least per call, so its ratio is against what the model must move. Negative controls: another model, the same
    model at another size (pool bytes or calls) keep their own ideal, a case's stated ideal
    (``ideal_bytes_per_call``) is never touched, nor a model with one case."""
    from types import SimpleNamespace

    import torch

    from compile_checks import Case
    from compile_checks.reports.tables import one_ideal_per_model

    def step(*args: object) -> None: ...

    def other(*args: object) -> None: ...

    def pools(fused: bool, slots: int = 16) -> dict[str, torch.Tensor]:
        kv = torch.zeros(2, slots, 4)
        return {"k": kv[0], "v": kv[1]} if fused else {"k": torch.zeros(slots, 4), "v": torch.zeros(slots, 4)}

    def run(
        name: str,
        fn: object,
        ideal: int,
        calls: int,
        source: str = "graph",
        problems: tuple[str, ...] = (),
        **kw: object,
    ) -> SimpleNamespace:
        kw.setdefault("pools", pools(False))
        result = SimpleNamespace(case=Case(name, fn, **kw), report=SimpleNamespace(problems=list(problems)))
        return SimpleNamespace(result=result, calls=calls, ideal=(ideal, source))

    split, fused = run("split", step, 1000, 4), run("fused", step, 3000, 4, pools=pools(True))  # 250 and 750 per call
    alone, stated = run("alone", other, 9000, 3), run("stated", other, 7, 3, source="case")
    bigger, longer = run("bigger", step, 4000, 4, pools=pools(False, 64)), run("longer", step, 6000, 8)
    one_ideal_per_model([split, fused, alone, stated, bigger, longer])
    assert split.ideal[0] == 1000 and fused.ideal[0] == 1000  # 250 per call x its 4 calls
    assert fused.ideal[1] == "graph, one per model (least of its 2 cases: split)"
    assert alone.ideal == (9000, "graph") and stated.ideal == (7, "case")
    assert bigger.ideal == (4000, "graph") and longer.ideal == (6000, "graph")  # another size: its own
    named = run("named", other, 100, 1, meta={"model": "tiny"})
    fused = run("fused", step, 6000, 2, meta={"model": "tiny"})  # the cases name their model: one ideal
    one_ideal_per_model([fused, named])
    assert named.ideal[0] == 100 and fused.ideal[0] == 200  # named's 100 per call is the least


def test_a_run_that_failed_the_check_is_never_the_models_ideal() -> None:
    """A lost write (AOT dropped the commit) leaves a graph that writes nothing: the least per call of its model,
    but not what the model must move. Only runs the check passed (but for copies) set the model's ideal; the failed
    one is measured against it too. Negative control: the same runs without the finding take the lost one's."""
    from types import SimpleNamespace

    from compile_checks import Case
    from compile_checks.reports.tables import one_ideal_per_model

    def runs(problems: tuple[str, ...]) -> list[SimpleNamespace]:
        def run(name: str, ideal: int, problems: tuple[str, ...] = ()) -> SimpleNamespace:
            result = SimpleNamespace(
                case=Case(name, print, meta={"model": "m"}), report=SimpleNamespace(problems=list(problems))
            )
            return SimpleNamespace(result=result, calls=2, ideal=(ideal, "graph"))

        return [run("split", 1536), run("fused", 4000), run("lost", 1024, problems)]

    split, fused, lost = runs(("lost_write: pool 'k': ...",))
    one_ideal_per_model([split, fused, lost])
    assert split.ideal == fused.ideal == lost.ideal == (1536, "graph, one per model (least of its 3 cases: split)")
    split, fused, lost = runs(())
    one_ideal_per_model([split, fused, lost])
    assert split.ideal[0] == fused.ideal[0] == 1024  # the control: the least graph wins when the check passed
