"""The docs' paging example (docs/guides/paging.md) runs and prints what the page says it prints."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import _warm_python as warm_python
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_paging_example_output_matches_readme() -> None:
    readme = (ROOT / "docs" / "guides" / "paging.md").read_text()
    example = (ROOT / "examples" / "paging_example.py").read_text()
    body = example.split('"""', 2)[2].strip()
    assert body in readme, "examples/paging_example.py drifted from the docs' code block (docs/guides/paging.md)"
    documented = re.search(re.escape(body) + r"\s*```\s*```\n(.*?)```", readme, re.S)
    assert documented is not None, "the output block after the example (docs/guides/paging.md) not found"
    run = warm_python.run(
        [sys.executable, str(ROOT / "examples" / "paging_example.py")], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == documented.group(1).strip()
