"""Kernel bytes as Inductor counts them, for the check and the bench."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from torch._inductor import compile_fx as compile_fx_module


@contextlib.contextmanager
def kernel_byte_metrics() -> Iterator[None]:
    """Make compile_fx count kernel bytes (``torch._inductor.metrics.num_bytes_accessed``; it
    does so only while its ``inductor_metrics`` log is at INFO), without printing that log."""
    log = compile_fx_module.inductor_metrics_log
    saved = (log.level, log.propagate, list(log.handlers), log.disabled)
    log.setLevel(logging.INFO)
    log.propagate = False
    log.disabled = False
    log.handlers = [logging.NullHandler()]
    try:
        yield
    finally:
        log.setLevel(saved[0])
        log.propagate = saved[1]
        log.handlers = saved[2]
        log.disabled = saved[3]


__all__ = ["kernel_byte_metrics"]
