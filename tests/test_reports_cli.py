"""The report command's files and exit codes, on a synthetic scenario registry (no compile)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from test_reports_traffic import FakeResult, FakeScenario, _clone

from compile_checks import cli
from compile_checks.check.findings import CloneReport, SurvivingClone
from compile_checks.reports import builtin, command
from compile_checks.reports import outputs as cli_outputs
from compile_checks.reports import run as report_run
from compile_checks.vocab import Mode

ROOT = Path(__file__).resolve().parents[1]


def report(argv: list[str]) -> int:
    """``compile-checks report ARGV`` through the one CLI."""
    return cli.main(["report", *argv])


def _fake_registry(
    monkeypatch: pytest.MonkeyPatch, fused_clones: int = 1, modes: list[Mode] | None = None
) -> dict[str, int]:
    """Install a fake compile_checks.scenarios; returns a dict counting runs per scenario."""
    scenarios = {
        "split": FakeScenario(name="split", layout="split", expect_clean=True),
        "fused": FakeScenario(name="fused", layout="fused", expect_clean=False),
        "fused_pool64MiB": FakeScenario(name="fused_pool64MiB", layout="fused", num_blocks=256, expect_clean=False),
    }
    runs: dict[str, int] = {}

    def run_builtin(s: FakeScenario, mode: Mode, dump_dir: str | None = None, pipeline: str = "stock") -> FakeResult:
        label = s.name if pipeline == "stock" else f"{s.name}[{pipeline}]"
        runs[label] = runs.get(label, 0) + 1
        if modes is not None:
            modes.append(mode)
        n = 0 if s.layout == "split" else fused_clones
        clones: list[SurvivingClone] = [_clone(s.num_blocks * 1024, region=1) for _ in range(n)]
        result = FakeResult(s, CloneReport(clones=clones, num_regions=2, region_calls={0: 12, 1: 6}))
        result.pipeline = str(pipeline)  # type: ignore[attr-defined]  # as reports.run.ScenarioRun has it
        return result

    mod = types.ModuleType("compile_checks.scenarios")
    mod.SCENARIOS = scenarios  # type: ignore[attr-defined]
    mod.DEFAULT_GATE = ("split",)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "compile_checks.scenarios", mod)
    monkeypatch.setattr(report_run, "run_builtin", run_builtin)
    return runs


def test_writes_all_files_with_one_row_per_scenario(monkeypatch, tmp_path, capsys) -> None:
    runs = _fake_registry(monkeypatch)
    out = tmp_path / "out"
    rc = report(["--out", str(out), "--no-progress", "--video-chunks", "7"])
    assert rc == 0
    assert runs == {"split": 1, "fused": 1, "fused_pool64MiB": 1}
    for name in cli_outputs.OUTPUT_FILES:
        assert (out / name).stat().st_size > 0, name
    df = pd.read_csv(out / "traffic.csv")
    assert list(df["case"]) == ["split", "fused", "fused_pool64MiB"]
    nodes = pd.read_csv(out / "traffic_nodes.csv")
    assert set(nodes["case"]) == {"fused", "fused_pool64MiB"}
    assert set(df["video_chunks"]) == {7}
    # fused: one 64 KiB clone in the commit region, 6 calls, 3 chunks -> 2*64Ki*6/3 per chunk
    fused = df.set_index("case").loc["fused"]
    assert fused["extra_bytes_per_chunk"] == 2 * 64 * 1024 * 6 / 3
    assert fused["extra_bytes_per_video"] == 7 * 2 * 64 * 1024 * 6 / 3
    assert "fused: expected clones" in capsys.readouterr().out


def test_unknown_scenario_exits_2_with_valid_names(monkeypatch, tmp_path, capsys) -> None:
    runs = _fake_registry(monkeypatch)
    rc = report(["--out", str(tmp_path), "--scenario", "split", "--scenario", "nope"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nope" in err and "fused" in err and "split" in err
    assert runs == {}  # nothing compiled before the check


def test_unwritable_out_dir_exits_3(monkeypatch, tmp_path, capsys) -> None:
    runs = _fake_registry(monkeypatch)
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc = report(["--out", str(blocker / "sub"), "--no-progress"])
    assert rc == 3
    assert "cannot write" in capsys.readouterr().err
    assert runs == {}


def test_baseline_growth_exits_1_and_names_the_scenario(monkeypatch, tmp_path, capsys) -> None:
    _fake_registry(monkeypatch, fused_clones=1)
    base = tmp_path / "baseline.json"
    assert report(["--out", str(tmp_path / "a"), "--no-progress", "--write-baseline", str(base)]) == 0
    written = json.loads(base.read_text())
    assert written["fused"]["surviving_clones"] == 1
    assert written["split"] == {"surviving_clones": 0, "extra_bytes_per_step": 0.0}
    capsys.readouterr()

    assert report(["--out", str(tmp_path / "b"), "--no-progress", "--baseline", str(base)]) == 0
    assert "baseline: ok" in capsys.readouterr().out

    _fake_registry(monkeypatch, fused_clones=2)
    rc = report(["--out", str(tmp_path / "c"), "--no-progress", "--baseline", str(base)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "REGRESSION fused" in err and "surviving_clones 1 -> 2" in err
    assert "split" not in err

    _fake_registry(monkeypatch, fused_clones=0)
    rc = report(["--out", str(tmp_path / "d"), "--no-progress", "--baseline", str(base)])
    assert rc == 0
    assert "fused improved" in capsys.readouterr().out


def test_bad_baseline_exits_2(monkeypatch, tmp_path, capsys) -> None:
    _fake_registry(monkeypatch)
    rc = report(["--out", str(tmp_path), "--baseline", str(tmp_path / "missing.json")])
    assert rc == 2
    assert "cannot read baseline" in capsys.readouterr().err


def test_failing_scenario_exits_4_without_traceback(monkeypatch, tmp_path, capsys) -> None:
    _fake_registry(monkeypatch)

    def boom(s, mode, dump_dir=None, pipeline="stock"):  # type: ignore[no-untyped-def]
        raise RuntimeError("inductor fell over")

    monkeypatch.setattr(report_run, "run_builtin", boom)
    rc = report(["--out", str(tmp_path), "--no-progress"])
    assert rc == 4
    err = capsys.readouterr().err
    assert "RuntimeError: inductor fell over" in err and "Traceback" not in err
    assert "inductor fell over" in (tmp_path / "error.txt").read_text()


def test_default_set_is_the_preferred_names_the_registry_has() -> None:
    registry = {"fused": 1, "split": 1, "other": 1}
    assert builtin.default_scenario_names(registry, ("other",)) == ["split", "fused"]
    assert builtin.default_scenario_names({"other": 1}, ("other", "missing")) == ["other"]


def test_pool_variants_resize_only_the_pool() -> None:
    from compile_checks.scenarios import SCENARIOS

    reg = builtin.with_pool_variants(SCENARIOS)
    for base, mib in builtin.POOL_VARIANTS:
        v, s = reg[builtin.pool_variant_name(base, mib)], SCENARIOS[base]
        assert v.total_pool_bytes == mib << 20
        assert (v.layout, v.chunk_size, v.window_chunks, v.sink_chunks, v.num_layers, v.expect_clean) == (
            s.layout,
            s.chunk_size,
            s.window_chunks,
            s.sink_chunks,
            s.num_layers,
            s.expect_clean,
        )
    assert all(name in reg for name in builtin.PREFERRED_DEFAULT)


def test_top_level_reports_holds_no_alias_modules() -> None:
    """reports/ (repo only) keeps the baseline, results and benchmarks; the report is compile_checks.reports."""
    import importlib.util

    assert sorted(p.name for p in (ROOT / "reports").glob("*.py")) == [
        "__init__.py",
        "__main__.py",
        "bench.py",
        "bench_full.py",
        "bench_hotpath.py",
        "bench_production.py",
        "bench_settle.py",
        "bench_writes.py",
        "bench_writes_dit.py",
        "cli_args.py",
        "diagram.py",
    ]
    for name in ("reports.cli", "reports.traffic", "reports.plot", "reports.baseline"):
        assert importlib.util.find_spec(name) is None, name


@pytest.mark.parametrize("module", ["reports", "compile_checks.reports"])
def test_python_m_entries_are_the_one_cli(module: str) -> None:
    p = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: compile-checks report") and "--baseline JSON" in p.stdout


def test_mode_is_analysis_only_by_default_full_on_request(monkeypatch, tmp_path) -> None:
    modes: list[Mode] = []
    runs = _fake_registry(monkeypatch, modes=modes)
    assert report(["--out", str(tmp_path / "a"), "--no-progress", "--scenario", "split"]) == 0
    assert report(["--out", str(tmp_path / "b"), "--no-progress", "--scenario", "split", "--analysis-only"]) == 0
    assert report(["--out", str(tmp_path / "c"), "--no-progress", "--scenario", "split", "--full"]) == 0
    assert runs == {"split": 3} and modes == [Mode.ANALYSIS_ONLY, Mode.ANALYSIS_ONLY, Mode.FULL]
    df = pd.read_csv(tmp_path / "c" / "traffic.csv")
    assert list(df["analysis_only"]) == [False]
    assert list(pd.read_csv(tmp_path / "a" / "traffic.csv")["analysis_only"]) == [True]


def test_contradicting_modes_and_gate_options_exit_2_before_running(monkeypatch, tmp_path, capsys) -> None:
    runs = _fake_registry(monkeypatch)
    assert report(["--out", str(tmp_path), "--full", "--analysis-only"]) == 2
    assert "--full and --analysis-only contradict" in capsys.readouterr().err
    assert cli.main(["--json", "report", "--out", str(tmp_path)]) == 2
    assert "report takes its own options" in capsys.readouterr().err
    assert runs == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "cannot read bench CSV"),
        ("a,b\n1,2\n", "lacks column(s) device, pool_bytes"),
        ("device,pool_bytes,split_median_ms,fused_median_ms\n", "has no rows"),
        ("device,pool_bytes,split_median_ms,fused_median_ms\ncpu,1024,fast,2.0\n", "split_median_ms must hold"),
        ("device,pool_bytes,split_median_ms,fused_median_ms\ncpu,1024,nan,2.0\n", "split_median_ms must hold"),
    ],
)
def test_bad_bench_csv_exits_2_before_running(monkeypatch, tmp_path, capsys, text: str, says: str) -> None:
    runs = _fake_registry(monkeypatch)
    bench = tmp_path / "bench.csv"
    bench.write_text(text)
    rc = report(["--out", str(tmp_path / "out"), "--no-progress", "--bench", str(bench)])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and "Traceback" not in err
    assert runs == {}  # refused before anything ran


def test_good_bench_csv_adds_a_panel(monkeypatch, tmp_path) -> None:
    _fake_registry(monkeypatch)
    bench = tmp_path / "bench.csv"
    bench.write_text("device,pool_bytes,split_median_ms,fused_median_ms\ncpu,16777216,1.0,2.0\ncpu,67108864,1.0,8.0\n")
    assert report(["--out", str(tmp_path / "out"), "--no-progress", "--bench", str(bench)]) == 0


def test_nan_baseline_exits_2_before_running(monkeypatch, tmp_path, capsys) -> None:
    runs = _fake_registry(monkeypatch)
    base = tmp_path / "b.json"
    base.write_text('{"split": {"surviving_clones": 0, "extra_bytes_per_step": NaN}}')
    rc = report(["--out", str(tmp_path / "out"), "--no-progress", "--baseline", str(base)])
    assert rc == 2 and "split.extra_bytes_per_step must be a finite number" in capsys.readouterr().err
    assert runs == {}


def test_pyproject_targets_are_read_and_bad_tables_exit_2(monkeypatch, tmp_path, capsys) -> None:
    _fake_registry(monkeypatch)
    assert command.pyproject_targets(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text('[tool.compile_checks]\ntargets = ["cases.py:CASES"]\n')
    assert command.pyproject_targets(tmp_path) == (["cases.py:CASES"], tmp_path)
    monkeypatch.chdir(tmp_path)  # cases.py does not exist: a bad target, exit 2 before anything runs
    rc = report(["--out", str(tmp_path / "out"), "--no-progress"])
    assert rc == 2 and "no such file" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").write_text('[tool.compile_checks]\ntargets = "cases.py:CASES"\n')
    assert report(["--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert "targets must be a list" in capsys.readouterr().err


def test_missing_report_extra_exits_2_with_the_install_line(monkeypatch, tmp_path, capsys) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tabulate" else real(name, *a))
    assert report(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pip install './ar-compile-checks[reports]'" in err  # the distribution's name (issue 50)
    assert "'compile-checks[reports]'" not in err


def test_user_cases_run_through_run_case_in_the_resolved_mode(monkeypatch, tmp_path) -> None:
    """The report's one run path is the gate's run_case (no compile here: run_case is a recording fake)."""
    from compile_checks.case import CaseResult

    seen: list[tuple[str, bool]] = []

    def fake_run_case(case, *, analysis_only=False, dump_dir=None):  # type: ignore[no-untyped-def]
        seen.append((case.name, analysis_only))
        output = case.driver(lambda *args, **kwargs: None)  # the report's counting driver: one call
        return CaseResult(
            case=case,
            report=CloneReport(num_regions=1, region_calls={0: 1}),
            output=output,
            analysis_only=analysis_only,
        )

    monkeypatch.setattr(report_run, "run_case", fake_run_case)
    cases = str(ROOT / "tests" / "report_cases" / "paged_step.py") + ":cases"
    assert report(["--out", str(tmp_path / "a"), "--no-progress", "--target", cases]) == 0
    assert report(["--out", str(tmp_path / "b"), "--no-progress", cases, "--full"]) == 0
    assert seen == [("my_split", True), ("my_fused", True), ("my_split", False), ("my_fused", False)]
    df = pd.read_csv(tmp_path / "b" / "traffic.csv")
    assert list(df["case"]) == ["my_split", "my_fused"] and list(df["num_steps"]) == [1, 1]


def test_report_takes_the_gates_table_targets_and_ci_outputs(monkeypatch, tmp_path, capsys) -> None:
    """TARGETs positionally (``--target`` a deprecated alias), ``--config``, ``--json``, ``--junitxml``,
    ``--verbose``: the same words as ``gate``. Negative control: a case that grew against the baseline is a
    failing testcase and ``ok: false`` in the document; the others are not."""
    seen: list[str] = []

    def fake_run_case(case, *, analysis_only=False, dump_dir=None):  # type: ignore[no-untyped-def]
        from compile_checks.case import CaseResult

        seen.append(case.name)
        output = case.driver(lambda *args, **kwargs: None)
        clones = [_clone(4096, region=0)] if "fused" in case.name else []
        return CaseResult(
            case=case, report=CloneReport(clones=clones, num_regions=1, region_calls={0: 1}), output=output
        )

    monkeypatch.setattr(report_run, "run_case", fake_run_case)
    cases = str(ROOT / "tests" / "report_cases" / "paged_step.py") + ":cases"
    assert report([cases, "--out", str(tmp_path / "a"), "--no-progress", "--verbose"]) == 0
    assert seen == ["my_split", "my_fused"]
    assert "warning" not in capsys.readouterr().err
    assert report(["--target", cases, "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    assert "report --target is deprecated" in capsys.readouterr().err and seen[2:] == ["my_split", "my_fused"]

    # --config: the table of another file (its targets); a missing one is exit 2
    elsewhere = tmp_path / "conf" / "pyproject.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(f'[tool.compile_checks]\ntargets = ["{cases}"]\n')
    base = tmp_path / "baseline.json"
    base.write_text(json.dumps({"my_split": {"surviving_clones": 0, "extra_bytes_per_step": 0}}))
    capsys.readouterr()
    junit = tmp_path / "j" / "report.xml"
    argv = [
        "--config",
        str(elsewhere),
        "--out",
        str(tmp_path / "c"),
        "--no-progress",
        "--json",
        "--junitxml",
        str(junit),
    ]
    assert report([*argv, "--baseline", str(base)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)  # stdout is the document alone
    assert doc["schema_version"] == 1 and [c["case"] for c in doc["cases"]] == ["my_split", "my_fused"]
    assert doc["baseline"]["ok"] is True and doc["baseline"]["new"] == ["my_fused"]
    import xml.etree.ElementTree as ET

    cases_xml = list(ET.parse(junit).getroot().iter("testcase"))
    assert [c.get("name") for c in cases_xml] == ["my_split", "my_fused"]
    assert all(c.find("failure") is None for c in cases_xml)
    # negative control: a baseline the fused case grew against (it had no copy then)
    base.write_text(json.dumps({"my_fused": {"surviving_clones": 0, "extra_bytes_per_step": 0}}))
    assert report([*argv, "--baseline", str(base)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["baseline"]["ok"] is False and doc["baseline"]["regressions"][0].startswith("my_fused")
    failed = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    assert failed == ["my_fused"]
    assert report(["--config", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "--config" in err and "no such file" in err


def test_scan_takes_verbose(tmp_path, capsys) -> None:
    """``--verbose or TORCH_LOGS shows them`` is what scan prints: scan --verbose is accepted (usage: exit 2 only
    for the missing path, the negative control)."""
    assert cli.main(["scan", str(tmp_path / "missing"), "--verbose"]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert cli.main(["scan", str(tmp_path / "missing"), "--verbsoe"]) == 2
    assert "unrecognized arguments: --verbsoe" in capsys.readouterr().err
