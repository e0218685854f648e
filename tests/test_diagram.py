"""The surviving-clone diagram in the docs is drawn from a real run (``python -m reports.diagram``).

The figures it drew (``docs/img/surviving_clone.json``, written beside the PNG) must be what a fresh
run of the check on the example's fused case finds: a change in the check's findings makes the picture
stale and fails here. Negative control: the split layout, run the same way, has no clone to draw.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.diagram import OUT, ROOT, draw, measure


@pytest.mark.compile
def test_the_committed_diagram_is_what_the_check_finds(tmp_path: Path) -> None:
    figures = measure("fused")
    assert json.loads(OUT.with_suffix(".json").read_text()) == figures
    # one storage; per layer K written in place, V cloned (a span holding V) and copied back
    assert figures["bytes_per_call"] == sum(lay["clone_bytes"] for lay in figures["layers"]) > 0
    for lay in figures["layers"]:
        assert lay["k_reinplaced"] and lay["cause"] == "shared_storage"
        assert lay["clone_span"][0] <= lay["v_span"][0] < lay["v_span"][1] <= lay["clone_span"][1]
    draw(figures, tmp_path / "d.png")
    assert (tmp_path / "d.png").stat().st_size > 10_000
    assert OUT.exists() and "img/surviving_clone.png" in (ROOT / "docs/concepts/why-copies-survive.md").read_text()


@pytest.mark.compile
def test_a_clean_layout_has_no_clone_to_draw(tmp_path: Path) -> None:
    figures = measure("split")
    assert figures["layers"] == [] and figures["bytes_per_call"] == 0
    with pytest.raises(RuntimeError, match="no surviving clone"):
        draw(figures, tmp_path / "d.png")
