"""What ``eager==compiled`` compared: analysis-only runs the post-grad graph, not Inductor's generated code.

The gate's column and ``--json`` say so (``eager_compared``), so a pass that never ran generated code
cannot read as one that did. Negative control: a ``--full`` row must not carry the analysis-only label,
and a case with no ``verify`` compared nothing.
"""

from __future__ import annotations

import json
import re

from rich.console import Console

from compile_checks.gate.outcome import EagerCompared, Outcome
from compile_checks.gate.outputs import json_document, verdict_table
from compile_checks.vocab import Pipeline


def _row(*, analysis_only: bool, eager_match: bool | None = True) -> Outcome:
    return Outcome("paged", "cases.py:cases/stock", Pipeline.STOCK, True, analysis_only, eager_match=eager_match)


def _table_text(outcome: Outcome) -> str:
    console = Console(width=400, record=True)
    console.print(verdict_table([outcome], "gate"))
    return console.export_text()


def test_analysis_only_says_it_compared_the_post_grad_graph() -> None:
    row = _row(analysis_only=True)
    assert row.eager_compared == EagerCompared.POST_GRAD
    text = _table_text(row)
    assert re.search(r"│ yes +│", text) and re.search(r"│ \(post-grad\) +│", text), text  # one part a line
    assert "(post-grad): eager was compared with the post-grad graph, not generated code" in text, text
    [case] = json.loads(json_document([row], 0, 1.0, []))["cases"]
    assert case["eager_compared"] == "post-grad graph, not generated code" and case["eager_match"] is True


def test_full_compared_the_generated_code() -> None:
    row = _row(analysis_only=False)
    assert row.eager_compared == EagerCompared.GENERATED
    text = _table_text(row)
    assert "post-grad" not in text and " yes " in text
    assert json.loads(json_document([row], 0, 1.0, []))["cases"][0]["eager_compared"] == "generated code"


def test_nothing_compared_is_null() -> None:
    row = _row(analysis_only=True, eager_match=None)
    assert row.eager_compared is None and row.to_dict()["eager_compared"] is None
    assert "post-grad" not in _table_text(row)
