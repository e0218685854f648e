"""traffic.html read back as a reader would: every case's verdict is on the page, in colour."""

from __future__ import annotations

from html.parser import HTMLParser

import pandas as pd
import pytest
from test_reports_traffic import FakeResult, FakeScenario, _clone, _report

from compile_checks.reports.html_page import STATUS_COLOURS, html_report
from compile_checks.reports.traffic import traffic_row, traffic_table

MIB = 1 << 20


class RowReader(HTMLParser):
    """case -> (data-status, text of the verdict badge, its style) for every table row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, tuple[str, str, str]] = {}
        self.images: list[str] = []
        self._row: tuple[str, str] | None = None
        self._badge_style: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and "data-case" in a:
            self._row = (a["data-case"] or "", a["data-status"] or "")
        elif tag == "span" and self._row is not None and a.get("class") == "status":
            self._badge_style = a.get("style") or ""
        elif tag == "img":
            self.images.append(a.get("src") or "")

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._badge_style is not None:
            self.rows[self._row[0]] = (self._row[1], data, self._badge_style)
            self._badge_style = None

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None


def _page(tmp_path) -> tuple[pd.DataFrame, str]:  # type: ignore[no-untyped-def]
    rows = [
        traffic_row(FakeResult(FakeScenario(name="split", layout="split", expect_clean=True), _report([]))),
        traffic_row(FakeResult(FakeScenario(name="fused"), _report([_clone(MIB, 1, written=MIB // 2)]))),
        traffic_row(FakeResult(FakeScenario(name="split<evil>", expect_clean=True), _report([_clone(MIB, 1)]))),
        traffic_row(FakeResult(FakeScenario(name="quiet", expect_clean=False), _report([]))),
    ]
    df = traffic_table(rows)
    from compile_checks.reports.plot import plot_traffic

    png = plot_traffic(df, tmp_path / "traffic.png")
    return df, html_report(df, 60, png)


def verdicts_on_page(page: str) -> dict[str, str]:
    reader = RowReader()
    reader.feed(page)
    return {
        case: text
        for case, (status, text, style) in reader.rows.items()
        if status == text and STATUS_COLOURS[text] in style
    }


def test_every_case_verdict_is_on_the_page_in_its_colour(tmp_path) -> None:
    df, page = _page(tmp_path)
    assert verdicts_on_page(page) == dict(zip(df["case"], df["status"]))
    assert verdicts_on_page(page) == {
        "split": "clean",
        "fused": "expected clones",
        "split<evil>": "REGRESSION",
        "quiet": "UNEXPECTEDLY CLEAN",
    }
    reader = RowReader()
    reader.feed(page)
    assert any(src.startswith("data:image/png;base64,") for src in reader.images)  # plot embedded
    assert "What this means" in page and "e+0" not in page  # human units, not 0.000000e+00
    assert "2 of 4 case(s) did not meet their expectation" in page


@pytest.mark.parametrize("tamper", ["status", "colour", "drop"])
def test_a_tampered_page_is_detected(tmp_path, tamper: str) -> None:
    df, page = _page(tmp_path)
    fused = 'data-case="fused" data-status="expected clones"'
    if tamper == "status":
        page = page.replace(fused, 'data-case="fused" data-status="clean"')
    elif tamper == "colour":
        start = page.index(fused)
        row = page[start : page.index("</tr>", start)]
        page = page.replace(row, row.replace(STATUS_COLOURS["expected clones"], STATUS_COLOURS["clean"]))
    else:
        start = page.index("<tr " + fused)
        page = page[:start] + page[page.index("</tr>", start) + 5 :]
    assert verdicts_on_page(page) != dict(zip(df["case"], df["status"]))


def test_plot_with_nothing_positive_stays_linear_and_is_written(tmp_path) -> None:
    """Every ideal not derivable (NaN) and nothing extra: a log axis had nothing to show and
    matplotlib raised ("Data cannot be log-scaled"), failing the whole report after every compile."""
    from compile_checks.reports.plot import plot_traffic

    row = traffic_row(FakeResult(FakeScenario(name="split", layout="split", expect_clean=True), _report([])))
    df = traffic_table([row]).assign(ideal_bytes_per_step=float("nan"))
    png = plot_traffic(df, tmp_path / "traffic.png")
    assert png.stat().st_size > 0
    logged = traffic_table([row])  # its twin with a positive ideal (log axes)
    assert plot_traffic(logged, tmp_path / "logged.png").stat().st_size > 0
