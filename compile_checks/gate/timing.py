"""The gate's cost against ``python -c "import torch"`` (``--timings``), and its progress display
(a bar on a terminal, a line per finished case elsewhere)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TextIO

from tqdm import tqdm

from compile_checks.gate.stderr_noise import terminal

if TYPE_CHECKING:
    from compile_checks.gate.outcome import Outcome


def import_torch_seconds() -> float:
    """Wall seconds of ``python -c "import torch"`` with this interpreter: the gate's unit of cost."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True)
    return time.perf_counter() - t0


def process_seconds() -> float | None:
    """Wall seconds since this process started (Linux ``/proc``), the gate's whole cost; None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, after "(comm)"
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def import_torch_comparison(gate_seconds: float, import_torch: Sequence[float]) -> str:
    """One line: the gate's wall as a multiple of ``import torch``, timed in the same run (side by side)."""
    unit = statistics.median(import_torch)
    samples = " / ".join(f"{t:.2f}" for t in import_torch)
    return (
        f'gate {gate_seconds:.1f} s (process wall) = {gate_seconds / unit:.1f}x `python -c "import torch"` '
        f"({unit:.2f} s, median of {samples} s timed before and after the gate in this run)"
    )


def case_line(o: Outcome, done: int, total: int, command: str = "gate") -> str:
    """One finished case, plain text (a CI log's live line): ``gate [3/24] split[vllm] pass 2.1 s`` (``dump
    [1/4] ...`` for dump)."""
    result = "pass" if o.passed else ("ERROR" if o.error is not None else "FAIL")
    return f"{command} [{done}/{total}] {o.label} {result} {o.wall_seconds:.1f} s"


def progress_callback(
    total: int, enabled: bool, stream: TextIO | None = None, command: str = "gate"
) -> tuple[Callable[[Outcome], None] | None, Callable[[], None]]:
    """The progress display on the real stderr (``enabled``); (callback, close).

    On a terminal a tqdm bar; elsewhere (a CI log, a pipe) one plain line per finished case as it
    finishes, flushed, as pytest prints: no carriage returns in a log."""
    stream = stream or terminal()  # torch's stderr may be held (stderr_noise); the display is ours
    if not enabled:
        return None, lambda: None
    if not stream.isatty():
        count = [0]

        def line(o: Outcome) -> None:
            count[0] += 1
            print(case_line(o, count[0], total, command), file=stream, flush=True)

        return line, lambda: None
    bar = tqdm(total=total, desc=command, unit="case", file=stream, leave=False)

    def done(o: Outcome) -> None:
        bar.set_postfix_str(o.label)
        bar.update(1)

    return done, bar.close


__all__ = ["case_line", "import_torch_comparison", "import_torch_seconds", "process_seconds", "progress_callback"]
