"""Keep pytest's log capture off torch's structured-trace logger while a test runs.

pytest (8.x) attaches its capture handlers to every logger that does not propagate, and
``torch.__trace`` (``torch._logging._internal.trace_log``) never propagates and is always at DEBUG:
torch emits a structured-trace record whenever that logger has a handler, so under pytest every
compile logged its graphs and payloads into the captured log (a failing check printed over a
thousand empty ``DEBUG torch.__trace`` lines) and paid for formatting them. The trace belongs to
``TORCH_TRACE`` (its own ``LazyTraceHandler`` stays); pytest's handlers are taken off for the test
phase and put back for pytest's own cleanup.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator


def _trace_logger() -> logging.Logger | None:
    # torch is never imported for this: a test that has not imported it has no trace logger yet
    internal = sys.modules.get("torch._logging._internal")
    logger = getattr(internal, "trace_log", None)
    return logger if isinstance(logger, logging.Logger) else None


@contextlib.contextmanager
def torch_trace_uncaptured() -> Iterator[None]:
    """Detach pytest's handlers (module ``_pytest.logging``) from ``torch.__trace`` for the block."""
    logger = _trace_logger()
    taken = [h for h in logger.handlers if type(h).__module__ == "_pytest.logging"] if logger is not None else []
    for handler in taken:
        logger.removeHandler(handler)  # type: ignore[union-attr]
    try:
        yield
    finally:
        for handler in taken:
            logger.addHandler(handler)  # type: ignore[union-attr]


__all__ = ["torch_trace_uncaptured"]
