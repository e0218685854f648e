"""One real, small traffic report end to end: compile split and fused, write the files."""

from __future__ import annotations

import pandas as pd
import pytest

from reports import cli


@pytest.mark.compile
def test_small_report_fused_has_clones_split_has_none(tmp_path, capsys) -> None:
    out = tmp_path / "report"
    baseline = tmp_path / "baseline.json"
    rc = cli.main(["--out", str(out), "--scenario", "split", "--scenario", "fused", "--no-progress",
                   "--analysis-only", "--write-baseline", str(baseline)])
    assert rc == 0, capsys.readouterr().err
    for name in ("traffic.csv", "traffic.md", "traffic.html", "traffic.png"):
        assert (out / name).stat().st_size > 0, name
    df = pd.read_csv(out / "traffic.csv").set_index("scenario")
    assert list(df.index) == ["split", "fused"]
    split, fused = df.loc["split"], df.loc["fused"]
    assert split["surviving_clones"] == 0 and split["clone_bytes_per_step"] == 0
    assert fused["surviving_clones"] > 0 and fused["clone_bytes_per_step"] > 0
    # same model, same window: the ideal does not depend on the layout
    assert fused["ideal_bytes_per_step"] == split["ideal_bytes_per_step"] > 0
    # a clone copies (part of) the pool: at least one layer's K or V pool per commit
    assert fused["clone_bytes_per_chunk"] >= 2 * fused["pool_bytes"] / (2 * fused["num_layers"])
    # the report's window model reproduces the scenario's own ideal bytes
    assert set(df["ideal_video_method"]) == {"window model"}
    md = (out / "traffic.md").read_text()
    assert "fused: expected clones" in md and "split: clean" in md
    # the baseline written holds this run's numbers
    from reports.baseline import load_baseline

    written = load_baseline(baseline)
    assert written["fused"].surviving_clones == fused["surviving_clones"]
    assert written["fused"].clone_bytes_per_step == pytest.approx(fused["clone_bytes_per_step"])
    assert written["split"].surviving_clones == 0
