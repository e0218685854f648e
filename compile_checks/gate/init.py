"""``compile-checks init``: a ``cases.py`` to start from (a clean case and its negative control) and the
``[tool.compile_checks]`` table that gates it, written into a folder. Torch-free.

The scaffold gates as written (``compile-checks gate`` in that folder exits 0): ``split`` keeps K and V
in two allocations and stays in place, ``fused`` (K and V as two views of one allocation) must keep
cloning. A file already there is never overwritten (``--force`` does); a ``pyproject.toml`` without the
table gets it appended, one that has it is left alone.
"""

from __future__ import annotations

from pathlib import Path

from compile_checks.errors import UnwritableOutput, UsageError
from compile_checks.gate.config import ConfigError, read_table

CASES_PY = '''\
"""The cases `compile-checks gate` checks: replace `step` with your engine's compiled step, and name
your cache tensors in `pools`. Keep a negative control: if the check ever stops seeing its copy, the
gate fails instead of going quietly blind."""

import torch

import ar_paging  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
from compile_checks import Case


def step(k_pool, v_pool, new_k, new_v, slots):
    torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slots)  # the commit
    return k_pool.index_select(0, slots).sum() + v_pool.index_select(0, slots).sum()


def cases():
    new = (torch.randn(4, 2, 8), torch.randn(4, 2, 8), torch.arange(4))
    k, v = torch.zeros(64, 2, 8), torch.zeros(64, 2, 8)  # two allocations: stays in place
    kv = torch.zeros(2, 64, 2, 8)  # K and V as two views of one allocation: cloned
    return [
        Case("split", step, args=(k, v, *new), pools={"k": k, "v": v}, expect_clean=True),
        # the negative control: this layout must keep cloning
        Case("fused", step, args=(kv[0], kv[1], *new), pools={"k": kv[0], "v": kv[1]}, expect_clean=False),
    ]
'''

TABLE = """\
[tool.compile_checks]
targets = ["cases.py:cases"]         # relative to this file; file.py:NAME or package.module:NAME
pipelines = ["stock"]                # how your engine compiles: add "vllm" for vLLM 0.33's own settings
junitxml = "compile-checks.xml"      # for CI
"""


def run_init(folder: Path, force: bool = False) -> list[str]:
    """Write the scaffold into ``folder``; the lines to print (what was written, what to run next).

    UsageError when ``cases.py`` exists (unless ``force``); UnwritableOutput when a file cannot be written.
    """
    if not folder.is_dir():
        raise UsageError(f"init: {folder} is no folder")
    cases, pyproject = folder / "cases.py", folder / "pyproject.toml"
    if cases.exists() and not force:
        raise UsageError(f"init: {cases} exists; --force overwrites it")
    lines = []
    try:
        cases.write_text(CASES_PY)
        lines.append(f"wrote {cases}: a clean case (split) and its negative control (fused)")
        if not pyproject.exists():
            pyproject.write_text(TABLE)
            lines.append(f"wrote {pyproject} with the [tool.compile_checks] table")
        elif read_table(pyproject, "compile_checks") is None:
            text = pyproject.read_text()
            pyproject.write_text(text + ("" if text.endswith("\n") or not text else "\n") + "\n" + TABLE)
            lines.append(f"added the [tool.compile_checks] table to {pyproject}")
        else:
            lines.append(f"{pyproject} already has a [tool.compile_checks] table: left as it is")
    except ConfigError as e:
        raise UsageError(f"init: {e}") from None
    except OSError as e:
        raise UnwritableOutput(f"init: cannot write into {folder}: {e.strerror or e}") from None
    lines.append(f"next: cd {folder} && compile-checks gate   (exit 0: split stays in place, fused still clones)")
    return lines


__all__ = ["CASES_PY", "TABLE", "run_init"]
