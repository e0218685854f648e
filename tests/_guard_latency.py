"""Dynamo's guard-latency probe off in the test workers.

Why: after it builds the guards of every frame it compiles, Dynamo flushes the CPU cache and times
one evaluation of them (``torch._dynamo.guards.profile_guard_manager``), only to log the latency and
add it to a compile metric (``guard_latency_us``). In the suite that is ~620 calls, ~12.5 s of the
workers' CPU (~20 ms each). Nothing a test reads comes from it: the guards are built and checked on
the frame (Dynamo's same-frame check) as before; only the logged number is 0.

Not for the product: it is torch's behaviour under plain ``torch.compile``, and a user's compile
metrics would lose a number. ``TESTS_GUARD_LATENCY=1`` measures as torch does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

GUARD_LATENCY_ENV = "TESTS_GUARD_LATENCY"  # "1": Dynamo measures each frame's guard latency


def unmeasured(*args: object) -> float:
    """In ``profile_guard_manager``'s place (the guard root and frame scope; newer torch adds an iteration count): no
    cache flush, no evaluation, latency 0."""
    return 0.0


@contextlib.contextmanager
def guard_latency_unmeasured() -> Iterator[None]:
    """Within the block, Dynamo compiles in this process without timing the guards it builds."""
    from torch._dynamo import guards  # the call site reads this module global on every compile

    measure = guards.profile_guard_manager  # AttributeError if torch renamed it: the speed-up is gone, say so
    guards.profile_guard_manager = unmeasured
    try:
        yield
    finally:
        guards.profile_guard_manager = measure
