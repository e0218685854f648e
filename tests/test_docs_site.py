"""Issue 50: the docs site reads at 1280 px with no sideways scroll.

The site is built (``mkdocs build`` into a temporary folder) and every code block of every page is
measured: no line wider than ``BUDGET`` columns, the width the transcripts are rendered at
(``tests/test_docs_examples.py``). ``docs/stylesheets/extra.css`` sets the code font so that many
columns fit the content column of a 1280 px window beside both sidebars (checked here from its
numbers, and by a look at the pages in a headless browser). sitemap.xml lists every page, and each
nav label is its page's title.
"""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 100  # columns of a code block (test_docs_examples.WIDTH)
CSS = ROOT / "docs" / "stylesheets" / "extra.css"


class _CodeBlocks(HTMLParser):
    """The text of every ``<pre>`` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.parts: list[str] = []
        self.blocks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "pre":
            self.depth += 1
            self.parts = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre" and self.depth:
            self.depth -= 1
            self.blocks.append("".join(self.parts))

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.parts.append(data)


def wide_code_lines(page_html: str, budget: int = BUDGET) -> list[str]:
    """Lines of the page's code blocks wider than ``budget`` columns (tabs expanded)."""
    parser = _CodeBlocks()
    parser.feed(page_html)
    return [line for block in parser.blocks for line in block.splitlines() if len(line.expandtabs()) > budget]


def test_a_planted_wide_code_line_is_found() -> None:
    """Negative control: a 101-column line in a code block is found, prose of any width is not."""
    wide = "x" * (BUDGET + 1)
    page = f"<p>{'word ' * 80}</p><pre><code>fits\n{wide}\n</code></pre><pre>{'y' * BUDGET}</pre>"
    assert wide_code_lines(page) == [wide]


def _nav_pages(items: list) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for item in items:
        for label, target in item.items():
            out += _nav_pages(target) if isinstance(target, list) else [(label, target)]
    return out


def test_every_nav_label_is_its_pages_title() -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages = _nav_pages(nav)
    assert len(pages) >= 30
    for label, target in pages:
        if label in ("Home", "Changelog"):  # the README-like index and the included CHANGELOG
            continue
        title = next(line for line in (ROOT / "docs" / target).read_text().splitlines() if line.strip())
        # the page's one H1, said by its label (or the label its first words: "A warm Inductor cache ...")
        assert title.startswith("# ") and title[2:].replace("`", "").startswith(label), (target, title)


def test_the_code_font_fits_the_budget_at_1280_px() -> None:
    """Material at 1280 px: root font 20 px, two 12.1 rem sidebars, 1.2 rem margins each side of the content;
    a monospace column is 0.6 em. The grid's max-width and the code font of extra.css must fit BUDGET columns
    and the block's padding (1.1765 em left, the right padding the CSS sets)."""
    css = CSS.read_text()
    grid = float(re.search(r"\.md-grid\s*{\s*max-width:\s*(\d+)px", css).group(1))  # type: ignore[union-attr]
    font_rem = float(re.search(r"pre > code\s*{\s*font-size:\s*([\d.]+)rem", css).group(1))  # type: ignore[union-attr]
    right_em = float(re.search(r"padding-right:\s*([\d.]+)em", css).group(1))  # type: ignore[union-attr]
    root, window = 20.0, 1280.0
    content = min(grid, window) - 2 * 12.1 * root - 2 * 1.2 * root
    font = font_rem * root
    needed = BUDGET * 0.6 * font + (1.1765 + right_em) * font
    assert needed <= content, (needed, content)
    assert "stylesheets/extra.css" in (ROOT / "mkdocs.yml").read_text()


@pytest.mark.slow
def test_the_built_site_has_no_code_wider_than_the_budget_and_a_sitemap(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pages = [p for p in site.rglob("index.html") if "assets" not in p.parts]
    assert len(pages) >= 30
    wide = {str(p.relative_to(site)): lines for p in pages if (lines := wide_code_lines(p.read_text()))}
    assert wide == {}
    assert 'href="stylesheets/extra.css"' in (site / "index.html").read_text()
    locs = re.findall(r"<loc>([^<]+)</loc>", (site / "sitemap.xml").read_text())
    assert len(locs) == len(pages), locs
