"""The report command's files and exit codes, on a synthetic scenario registry (no compile)."""

from __future__ import annotations

import json
import sys
import types

import pandas as pd
import pytest

from compile_checks.findings import CloneReport, SurvivingClone
from reports import cli
from test_reports_traffic import FakeResult, FakeScenario, _clone



def _fake_registry(monkeypatch: pytest.MonkeyPatch, fused_clones: int = 1) -> dict[str, int]:
    """Install a fake compile_checks.scenarios; returns a dict counting runs per scenario."""
    scenarios = {
        "split": FakeScenario(name="split", layout="split", expect_clean=True),
        "fused": FakeScenario(name="fused", layout="fused", expect_clean=False),
        "fused_pool64MiB": FakeScenario(name="fused_pool64MiB", layout="fused", num_blocks=256,
                                         expect_clean=False),
    }
    runs: dict[str, int] = {}

    def run_scenario(s: FakeScenario, dump_dir: str | None = None, progress: bool = False) -> FakeResult:
        runs[s.name] = runs.get(s.name, 0) + 1
        n = 0 if s.layout == "split" else fused_clones
        clones: list[SurvivingClone] = [_clone(s.num_blocks * 1024, region=1) for _ in range(n)]
        return FakeResult(s, CloneReport(clones=clones, num_regions=2, region_calls={0: 12, 1: 6}))

    mod = types.ModuleType("compile_checks.scenarios")
    mod.SCENARIOS = scenarios  # type: ignore[attr-defined]
    mod.DEFAULT_GATE = ("split",)  # type: ignore[attr-defined]
    mod.run_scenario = run_scenario  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "compile_checks.scenarios", mod)
    return runs


def test_writes_all_files_with_one_row_per_scenario(monkeypatch, tmp_path, capsys) -> None:
    runs = _fake_registry(monkeypatch)
    out = tmp_path / "out"
    rc = cli.main(["--out", str(out), "--no-progress", "--video-chunks", "7"])
    assert rc == 0
    assert runs == {"split": 1, "fused": 1, "fused_pool64MiB": 1}
    for name in ("traffic.csv", "traffic.md", "traffic.html", "traffic.png"):
        assert (out / name).stat().st_size > 0, name
    df = pd.read_csv(out / "traffic.csv")
    assert list(df["scenario"]) == ["split", "fused", "fused_pool64MiB"]
    assert set(df["video_chunks"]) == {7}
    # fused: one 64 KiB clone in the commit region, 6 calls, 3 chunks -> 2*64Ki*6/3 per chunk
    fused = df.set_index("scenario").loc["fused"]
    assert fused["clone_bytes_per_chunk"] == 2 * 64 * 1024 * 6 / 3
    assert fused["clone_bytes_per_video"] == 7 * 2 * 64 * 1024 * 6 / 3
    assert "fused: expected clones" in capsys.readouterr().out


def test_unknown_scenario_exits_2_with_valid_names(monkeypatch, tmp_path, capsys) -> None:
    runs = _fake_registry(monkeypatch)
    rc = cli.main(["--out", str(tmp_path), "--scenario", "split", "--scenario", "nope"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nope" in err and "fused" in err and "split" in err
    assert runs == {}  # nothing compiled before the check


def test_unwritable_out_dir_exits_3(monkeypatch, tmp_path, capsys) -> None:
    runs = _fake_registry(monkeypatch)
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc = cli.main(["--out", str(blocker / "sub"), "--no-progress"])
    assert rc == 3
    assert "cannot write" in capsys.readouterr().err
    assert runs == {}


def test_baseline_growth_exits_1_and_names_the_scenario(monkeypatch, tmp_path, capsys) -> None:
    _fake_registry(monkeypatch, fused_clones=1)
    base = tmp_path / "baseline.json"
    assert cli.main(["--out", str(tmp_path / "a"), "--no-progress", "--write-baseline", str(base)]) == 0
    written = json.loads(base.read_text())
    assert written["fused"]["surviving_clones"] == 1
    assert written["split"] == {"surviving_clones": 0, "clone_bytes_per_step": 0.0}
    capsys.readouterr()

    assert cli.main(["--out", str(tmp_path / "b"), "--no-progress", "--baseline", str(base)]) == 0
    assert "baseline: ok" in capsys.readouterr().out

    _fake_registry(monkeypatch, fused_clones=2)
    rc = cli.main(["--out", str(tmp_path / "c"), "--no-progress", "--baseline", str(base)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "REGRESSION fused" in err and "surviving_clones 1 -> 2" in err
    assert "split" not in err

    _fake_registry(monkeypatch, fused_clones=0)
    rc = cli.main(["--out", str(tmp_path / "d"), "--no-progress", "--baseline", str(base)])
    assert rc == 0
    assert "fused improved" in capsys.readouterr().out


def test_bad_baseline_exits_2(monkeypatch, tmp_path, capsys) -> None:
    _fake_registry(monkeypatch)
    rc = cli.main(["--out", str(tmp_path), "--baseline", str(tmp_path / "missing.json")])
    assert rc == 2
    assert "cannot read baseline" in capsys.readouterr().err


def test_failing_scenario_exits_4_without_traceback(monkeypatch, tmp_path, capsys) -> None:
    _fake_registry(monkeypatch)

    def boom(s, dump_dir=None, progress=False):  # type: ignore[no-untyped-def]
        raise RuntimeError("inductor fell over")

    monkeypatch.setattr(sys.modules["compile_checks.scenarios"], "run_scenario", boom)
    rc = cli.main(["--out", str(tmp_path), "--no-progress"])
    assert rc == 4
    err = capsys.readouterr().err
    assert "RuntimeError: inductor fell over" in err and "Traceback" not in err
    assert "inductor fell over" in (tmp_path / "error.txt").read_text()


def test_default_set_is_the_preferred_names_the_registry_has() -> None:
    registry = {"fused": 1, "split": 1, "other": 1}
    assert cli.default_scenario_names(registry, ("other",)) == ["split", "fused"]
    assert cli.default_scenario_names({"other": 1}, ("other", "missing")) == ["other"]


def test_pool_variants_resize_only_the_pool() -> None:
    from compile_checks.scenarios import SCENARIOS

    reg = cli.with_pool_variants(SCENARIOS)
    for base, mib in cli.POOL_VARIANTS:
        v, s = reg[cli.pool_variant_name(base, mib)], SCENARIOS[base]
        assert v.total_pool_bytes == mib << 20
        assert (v.layout, v.chunk_size, v.window_chunks, v.sink_chunks, v.num_layers, v.expect_clean) == (
            s.layout, s.chunk_size, s.window_chunks, s.sink_chunks, s.num_layers, s.expect_clean)
    assert all(name in reg for name in cli.PREFERRED_DEFAULT)
