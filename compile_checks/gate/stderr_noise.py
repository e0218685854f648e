"""Hold what torch, vLLM and the engine write on stderr while the CLI runs; show it when it fails.

Why: importing vLLM on a CPU prints ~9 lines (``No module named 'vllm._C'``, "Triton is not
installed", torch's deprecation warnings) and every graph break a warning block, above a table
that passed. A failing run shows all of it (it may be why); a passing one prints one line saying
how much was held and that ``--verbose`` shows it. ``TORCH_LOGS`` set by the user, or
``--verbose``, streams it as before: nothing is held that was asked for.

How: at the file-descriptor level (``dup2`` of fd 2 onto a temporary file), so C++ warnings,
logging handlers created at import (they hold ``sys.stderr``) and ``--jobs`` / rank subprocesses
(they inherit fd 2) are held alike. The CLI's own messages and the progress bar go to
:func:`terminal`, the real stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import IO, TextIO

_terminal: list[TextIO] = []  # the real stderr while output is held (innermost last)


def terminal() -> TextIO:
    """Where the CLI's own stderr output goes: the real stderr, also while torch's is held."""
    return _terminal[-1] if _terminal else sys.stderr


def wanted(verbose: bool) -> bool:
    """Hold unless the user asked to see torch's logs (``--verbose``, ``TORCH_LOGS``)."""
    return not verbose and not os.environ.get("TORCH_LOGS")


class HeldStderr:
    """What was written on fd 2 inside :func:`held_stderr`; ``text`` once the block has ended."""

    def __init__(self) -> None:
        self.text = ""

    def show(self, *, failed: bool) -> None:
        """On stderr: failed, everything held, under a header; passed, one line, if anything was held. Blank
        lines are nothing: held text of only blank lines shows no block."""
        out = sys.stderr
        lines = [line for line in self.text.splitlines() if line.strip()]
        if not lines:
            return
        if failed:
            print(f"--- stderr of torch, vLLM and the cases during the run ({len(lines)} lines) ---", file=out)
            out.write("\n".join(lines) + "\n")
            print("--- end of that stderr ---", file=out)
        else:
            print(f"({len(lines)} lines of torch / vLLM stderr held: --verbose or TORCH_LOGS shows them)", file=out)
        out.flush()


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO, pytest's CaptureIO, a closed stream
        return None


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or replaced stream has nothing to flush
            stream.flush()


@contextlib.contextmanager
def held_stderr(enabled: bool = True) -> Iterator[HeldStderr]:
    """fd 2 goes to a temporary file for the block (``enabled``), then back; the text is kept."""
    held = HeldStderr()
    if not enabled:
        yield held
        return
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (a daemon): nothing to hold
        yield held
        return
    sink: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, after reading it back
    # sys.stderr on fd 2: the real one is a stream on the saved fd. Replaced (pytest's capsys, an IDE):
    # it never reached fd 2, and stays the CLI's own stream.
    owned = _fileno(sys.stderr) == 2
    real = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace") if owned else sys.stderr
    _flush_std()
    os.dup2(sink.fileno(), 2)
    _terminal.append(real)
    try:
        yield held
    finally:
        _flush_std()
        os.dup2(saved, 2)
        os.close(saved)
        _terminal.remove(real)
        if owned:
            real.close()
        sink.seek(0)
        held.text = sink.read().decode("utf-8", errors="replace")
        sink.close()
