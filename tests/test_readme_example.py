"""The README's paging example runs and prints what the README says it prints."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import _warm_python as warm_python
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_paging_example_output_matches_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    example = (ROOT / "examples" / "paging_example.py").read_text()
    body = example.split('"""', 2)[2].strip()
    assert body in readme, "examples/paging_example.py drifted from the README's code block"
    documented = re.search(re.escape(body) + r"\s*```\s*```\n(.*?)```", readme, re.S)
    assert documented is not None, "README output block after the example not found"
    run = warm_python.run(
        [sys.executable, str(ROOT / "examples" / "paging_example.py")], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == documented.group(1).strip()
