"""README.md, CHANGELOG.md and docs/ are documentation, not a lab notebook: no machine paths, no work
sessions, no issue numbers, no commit hashes, no dates of work (history goes into CHANGELOG.md as one
line per user-visible change, figures come from the benchmarks' results files)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOK_PATTERNS: dict[str, re.Pattern[str]] = {
    "machine path": re.compile(r"(?<![\w.~-])/(?:work|tmp|home|root|Users|mnt|scratch)/"),
    "work session": re.compile(
        r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(?:st|nd|rd|th)|this|"
        r"next|last|previous|earlier|same) session\b|\bsession \d+\b",
        re.I,
    ),
    "issue number": re.compile(r"\bissues? #?\d+|(?<![\w&])#\d{1,4}\b", re.I),
    "commit hash": re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
    "date of work": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
}


# generated blocks that are tables of numbers only (the eviction table imports vLLM to build one)
NUMBERS_ONLY = {"eviction-table"}


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def notebook_lines(text: str, where: str) -> list[str]:
    """``where:line: kind: text`` for every line that reads like a lab notebook."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for kind, pattern in NOTEBOOK_PATTERNS.items():
            if pattern.search(line):
                found.append(f"{where}:{n}: {kind}: {line.strip()[:120]}")
    return found


def test_the_docs_hold_no_lab_notebook() -> None:
    found = [hit for path in doc_files() for hit in notebook_lines(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == []


@pytest.mark.parametrize(
    "line",
    [
        "the scripts under /work/repro/ab.sh measured it",
        "TORCH_TRACE=/tmp/trace python serve.py",
        "Issue 20, the sixth session: faster",
        "what the seventh session changed",
        "see issue 35 for the plan",
        "fixed in 97a9ee7 (the review mend)",
        "measured 2026-12-05 on the idle machine",
    ],
)
def test_a_planted_notebook_line_is_found(tmp_path: Path, line: str) -> None:
    """Negative control: each kind of notebook line, planted in a page, is found."""
    page = tmp_path / "page.md"
    page.write_text(f"# A page\n\nSome prose.\n\n{line}\n")
    assert len(notebook_lines(page.read_text(), "page.md")) >= 1


def test_ordinary_prose_is_not_flagged() -> None:
    """The patterns leave documentation alone: a session form, sizes, hex-free numbers, relative paths."""
    prose = (
        "The session form: `with pool_clone_check.session(pools=...) as s:`; 1024 tokens, 2368.00x;\n"
        "`compile-checks scan trace/ --pools pools.toml`; `reports/results/bench.json`; decade 1234567;\n"
        "torch 2.14.0+cu130; `clone_default_1`; `dedicated_log_torch_trace_*.log`\n"
    )
    assert notebook_lines(prose, "prose") == []


# --- paragraphs a reader can take in: none longer than MAX_WORDS words ---

MAX_WORDS = 120
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s+")


def paragraphs(text: str) -> list[tuple[int, int]]:
    """``(first line, words)`` of every prose paragraph: lines between blank lines, outside code fences,
    headings, tables and HTML comments; a list item starts its own (as Python-Markdown reads a list: a
    marker line continues a paragraph that is not a list item)."""
    out: list[tuple[int, int]] = []
    start, words, fence, in_list = 0, 0, False, False
    for n, line in enumerate([*text.splitlines(), ""], 1):
        s = line.strip()
        if s.startswith("```"):
            fence = not fence
        item = bool(LIST_ITEM.match(line)) and (not words or in_list)
        if fence or s.startswith(("```", "|", "#", "<!--")) or not s or item:
            if words:
                out.append((start, words))
            start, words, in_list = (n, len(s.split()) - 1, True) if item and not fence else (0, 0, False)
            continue
        if not words:
            start, in_list = n, False
        words += len(s.split())
    return out


def long_paragraphs(text: str, where: str) -> list[str]:
    return [f"{where}:{n}: {w} words" for n, w in paragraphs(text) if w > MAX_WORDS]


def test_no_paragraph_runs_past_the_limit() -> None:
    found = [hit for path in doc_files() for hit in long_paragraphs(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == []


def test_a_long_paragraph_is_found() -> None:
    """Negative control: a 130-word paragraph is found, in prose and in a list item; split in two, or in a
    code block, or as two list items, it is not."""
    long = " ".join(["word"] * 130)
    assert long_paragraphs(f"# Page\n\n{long}\n", "p") == ["p:3: 130 words"]
    assert long_paragraphs(f"- {long}\n", "p") == ["p:1: 130 words"]
    half = " ".join(["word"] * 65)
    assert long_paragraphs(f"{half}\n\n{half}\n", "p") == []
    assert long_paragraphs(f"```text\n{long}\n```\n", "p") == []
    assert long_paragraphs(f"- {half}\n- {half}\n", "p") == []
    # a '+' starting a wrapped line inside a paragraph does not start a list (Python-Markdown)
    assert long_paragraphs(f"{half}\n+ {half}\n", "p") == ["p:1: 131 words"]


@pytest.mark.slow
def test_generated_reference_holds_no_lab_notebook() -> None:
    """The reference pages are generated at build time: what the generators write is documentation too."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import reference
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    texts = {name: gen() for name, gen in reference.GENERATORS.items() if name not in NUMBERS_ONLY}
    found = [hit for name, text in texts.items() for hit in notebook_lines(text, f"generated:{name}")]
    assert found == []
