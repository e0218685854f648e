"""Examples in README.md and docs/ cannot rot: every transcript that claims an output is run here.

A claimed output is a fenced block preceded by ``<!-- output-of: NAME -->``: its first line is the
command (``$ ...``), the rest what it printed (an excerpt: lines may be left out, ``…`` marks a cut).
``PRODUCERS`` runs the command behind each NAME once; every line of every block of that NAME must be in
what it printed (table borders, whitespace and decimal figures such as timings aside). A transcript
(``$ ...``) without a marker fails: nothing claims an output unchecked.

Transcripts are shown as a terminal of ``WIDTH`` (100) columns shows them: the commands run with
``COLUMNS=100`` (rich lays its tables out to it) and a longer line is wrapped at a word with a hanging
indent; no line of a transcript is wider (the site cuts wider code blocks). To rewrite every block from
what its command prints now: ``DOCS_WRITE_TRANSCRIPTS=1 pytest tests/test_docs_examples.py -n 0``.
"""

from __future__ import annotations

import os
import re
import runpy
import shlex
import shutil
import sys
import textwrap
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKED = re.compile(r"<!-- output-of: ([a-z0-9-]+) -->\n```[\w-]*\n(.*?)```", re.S)
FENCE = re.compile(r"(<!-- output-of: [a-z0-9-]+ -->\n)?```[\w-]*\n(.*?)```", re.S)
BOX = re.compile(r"[\u2500-\u257f]")
DECIMAL = re.compile(r"\d+\.\d+")
WIDTH = 100  # columns of the terminal a transcript shows
REWRITE = os.environ.get("DOCS_WRITE_TRANSCRIPTS") == "1"

WRONG_EXPECTATION = """from cases import cases as _cases


def cases():
    return [c.replace(expect_clean=True) if c.name == "fused" else c for c in _cases()]
"""


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def marked_blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in MARKED.finditer(text)]


def unmarked_transcripts(text: str) -> list[str]:
    """First lines of fenced blocks that start with a ``$ `` command and carry no output-of marker."""
    return [
        m.group(2).splitlines()[0]
        for m in FENCE.finditer(text)
        if m.group(1) is None and m.group(2).lstrip().startswith("$ ")
    ]


def terminal_lines(output: str, width: int = WIDTH) -> list[str]:
    """``output`` as a terminal of ``width`` columns shows it, wrapped at words: a longer line continues on
    lines indented 4 more than its own."""
    lines: list[str] = []
    for line in output.rstrip("\n").splitlines():
        line = line.rstrip()
        if len(line) <= width:
            lines.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        lines += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False)
    return lines


def wide_lines(text: str, width: int = WIDTH) -> list[str]:
    """Lines of claimed-output blocks wider than ``width`` columns (the ``$`` command line included)."""
    return [line for _, block in marked_blocks(text) for line in block.splitlines() if len(line) > width]


def rewritten(text: str, name: str, output: str) -> str:
    """``text`` with every block of ``name`` replaced by its command line and ``output`` at ``WIDTH`` columns."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) != name:
            return m.group(0)
        body = "\n".join([m.group(2).splitlines()[0], *terminal_lines(output)]) + "\n"
        return m.group(0)[: m.start(2) - m.start(0)] + body + "```"

    return MARKED.sub(one, text)


def normalized(text: str) -> str:
    return " ".join(DECIMAL.sub("#", BOX.sub(" ", text)).split())


def block_problems(block: str, output: str) -> list[str]:
    """Lines of ``block`` (after its ``$`` command) that are not in ``output``."""
    seen = normalized(output)
    lines = block.splitlines()
    if lines and lines[0].startswith("$ "):
        lines = lines[1:]
    return [line for line in lines if "…" not in line and normalized(line) and normalized(line) not in seen]


def command_of(block: str) -> list[str]:
    """The block's command as argv, without environment assignments."""
    argv = shlex.split(block.splitlines()[0].removeprefix("$ "))
    return [a for a in argv if not re.match(r"^[A-Z_]+=", a)]


def test_every_transcript_claims_a_checked_output() -> None:
    for path in doc_files():
        text = path.read_text()
        assert unmarked_transcripts(text) == [], path
        assert {name for name, _ in marked_blocks(text)} <= set(PRODUCERS), path


def test_transcripts_fit_the_terminal_width() -> None:
    for path in doc_files():
        assert wide_lines(path.read_text()) == [], path


def test_a_wide_transcript_is_found_and_wrapping_keeps_it_checkable() -> None:
    """Negative control: a 150-column line in a claimed output is found; wrapped, it fits and still matches."""
    long = "  fused: " + " ".join(f"word{i:03d}" for i in range(20))  # 149 columns
    page = f"<!-- output-of: example-gate -->\n```console\n$ compile-checks gate\n{long}\n```\n"
    assert wide_lines(page) == [long]
    fixed = rewritten(page, "example-gate", f"table\n{long}\n")
    assert wide_lines(fixed) == [] and fixed.count("word") == 20
    assert fixed.splitlines()[5].startswith("      word")  # continued 4 columns further in
    assert block_problems(marked_blocks(fixed)[0][1], f"table\n{long}\n") == []


def test_an_unmarked_transcript_is_found() -> None:
    """Negative control: a transcript planted without its marker is reported; with it, it is not."""
    body = "```console\n$ compile-checks gate\n2 case(s), 0 failed\n```\n"
    assert unmarked_transcripts("# Page\n\n" + body) == ["$ compile-checks gate"]
    assert unmarked_transcripts("# Page\n\n<!-- output-of: example-gate -->\n" + body) == []


def test_block_comparison_catches_drift() -> None:
    """Negative control: a block whose line differs from the output is reported; timings and borders are not."""
    output = "┃ case ┃ result ┃ wall s ┃\n│ split │ pass   │ 1.3    │\n2 case(s), 0 failed, in 4.3 s; exit 0\n"
    same = "$ compile-checks gate\n│ split   │ pass │ 2.9 │\n…\n2 case(s), 0 failed, in 9.9 s; exit 0\n"
    assert block_problems(same, output) == []
    drifted = same.replace("pass", "FAIL")
    assert block_problems(drifted, output) == ["│ split   │ FAIL │ 2.9 │"]


# --- the producers: NAME -> (argv the block must show, what it prints), run in this process ---


class _Run:
    """What a producer needs: a scratch folder, pytest's capture, and a way to undo chdir / sys.modules."""

    def __init__(self, tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp, self.capsys, self.monkeypatch = tmp, capsys, monkeypatch

    def in_folder(self, folder: Path) -> None:
        self.monkeypatch.chdir(folder)
        self.monkeypatch.syspath_prepend(str(folder))
        for name in ("cases", "toy_dit", "wrong_expectation"):  # another example's modules of the same name
            self.monkeypatch.delitem(sys.modules, name, raising=False)


def _example_dir(tmp: Path) -> Path:
    work = tmp / "engine"
    if not work.exists():
        shutil.copytree(ROOT / "examples" / "engine", work, ignore=shutil.ignore_patterns("out", "__pycache__"))
        (work / "wrong_expectation.py").write_text(WRONG_EXPECTATION)
    return work


def _gate(run: _Run, args: list[str], want_rc: int) -> str:
    """``compile-checks ARGS`` (the console script's ``main``) in a copy of examples/engine."""
    from compile_checks.cli import main

    run.in_folder(_example_dir(run.tmp))
    run.capsys.readouterr()
    rc = main([*args, "--no-progress"])
    out = run.capsys.readouterr().out
    assert rc == want_rc, out[-3000:]
    return out


def _aten_demo(run: _Run) -> str:
    """``python aten_writes_demo.py`` in examples/."""
    run.in_folder(ROOT / "examples")
    run.capsys.readouterr()
    runpy.run_path(str(ROOT / "examples" / "aten_writes_demo.py"), run_name="__main__")
    return run.capsys.readouterr().out


GATE_OK = ["gate", "--pipeline", "stock"]
GATE_FAILS = ["gate", "wrong_expectation.py:cases", "--pipeline", "stock"]
PRODUCERS: dict[str, tuple[list[str], Callable[[_Run], str]]] = {
    "example-gate": (["compile-checks", *GATE_OK], lambda run: _gate(run, GATE_OK, 0)),
    "example-gate-fails": (["compile-checks", *GATE_FAILS], lambda run: _gate(run, GATE_FAILS, 1)),
    "aten-writes-demo": (["python", "aten_writes_demo.py"], _aten_demo),
}


@cache
def _blocks(name: str) -> list[tuple[str, str]]:
    return [(str(p.relative_to(ROOT)), b) for p in doc_files() for n, b in marked_blocks(p.read_text()) if n == name]


@pytest.mark.slow
@pytest.mark.compile
@pytest.mark.parametrize("name", sorted(PRODUCERS))
def test_claimed_outputs_are_what_the_command_prints(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = _blocks(name)
    assert blocks, f"no page shows the output of {name}"
    argv, produce = PRODUCERS[name]
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    output = produce(_Run(tmp_path, capsys, monkeypatch))
    if REWRITE:  # the pages' blocks of NAME become what the command printed now
        for path in doc_files():
            path.write_text(rewritten(path.read_text(), name, output))
        blocks = [
            (str(p.relative_to(ROOT)), b) for p in doc_files() for n, b in marked_blocks(p.read_text()) if n == name
        ]
    for where, block in blocks:
        assert command_of(block) == argv, where
        assert block_problems(block, output) == [], where


def _readme_cases_module() -> dict[str, object]:
    readme = (ROOT / "README.md").read_text()
    source = readme.split("**1. A `cases.py`**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {"__name__": "readme_cases"}
    exec(compile(source, "README.md:cases.py", "exec"), namespace)
    return namespace


@pytest.mark.compile
def test_the_readme_minimal_cases_meet_their_expectations() -> None:
    """The README's five-minute cases.py: split stays clean, fused (its negative control) keeps its clone."""
    from compile_checks import run_case

    cases = _readme_cases_module()["cases"]
    results = [run_case(c, analysis_only=True) for c in cases()]  # type: ignore[operator]
    assert [(r.case.name, r.report.clean, r.passed) for r in results] == [("split", True, True), ("fused", False, True)]
    # negative control: the same fused case expected clean fails
    fused = next(c for c in cases() if c.name == "fused")  # type: ignore[operator]
    assert not run_case(fused.replace(expect_clean=True), analysis_only=True).passed
