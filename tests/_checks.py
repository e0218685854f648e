"""Assertion helpers shared by the test modules."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import torch


def check_rejects(fn: Callable[[], object], match: str) -> None:
    """The check: ``fn()`` raises a ValueError whose message names ``match``."""
    try:
        fn()
    except ValueError as err:
        assert re.search(match, str(err)), f"ValueError does not name {match!r}: {err}"
        return
    except Exception as err:
        raise AssertionError(f"expected ValueError naming {match!r}, got {type(err).__name__}: {err}") from err
    raise AssertionError(f"expected ValueError naming {match!r}; nothing was raised")


# Inductor's C++ wrapper allocates each buffer with empty_strided_cpu((shape), (stride), torch.dtype)
_ALLOC = re.compile(r"empty_strided_cpu\(\(([^)]*)\), \([^)]*\), torch\.(\w+)\)")


def pool_sized_allocations(code: str, pool_bytes: int) -> list[int]:
    """Bytes of every buffer the compiled module allocates that is at least one pool big."""
    out = []
    for shape, dtype in _ALLOC.findall(code):
        numel = math.prod(int(d) for d in shape.replace(" ", "").split(",") if d)
        nbytes = numel * getattr(torch, dtype).itemsize
        if nbytes >= pool_bytes:
            out.append(nbytes)
    return out
