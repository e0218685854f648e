"""``gate --timings``: the gate's wall against ``python -c "import torch"``, timed in the same run."""

from __future__ import annotations

import time

from compile_checks.gate.timing import import_torch_comparison, import_torch_seconds, process_seconds


def test_comparison_is_the_gate_over_the_median_import() -> None:
    line = import_torch_comparison(40.0, [2.0, 3.0, 1.0])
    assert line.startswith('gate 40.0 s (process wall) = 20.0x `python -c "import torch"` (2.00 s, median of')
    assert "2.00 / 3.00 / 1.00 s" in line
    assert "= 40.0x" in import_torch_comparison(40.0, [1.0])  # another unit, another multiple


def test_process_seconds_counts_from_the_process_start_and_import_torch_is_timed() -> None:
    before = process_seconds()
    assert before is not None and before > 0  # Linux /proc: this pytest process has been running
    time.sleep(0.05)
    assert process_seconds() >= before + 0.04  # type: ignore[operator]
    assert import_torch_seconds() > 0.1  # a real interpreter importing torch, not a constant
