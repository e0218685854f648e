"""A case built without allocating (model, pools and inputs on ``meta`` or under ``FakeTensorMode``), made
ready to compile: its meta tensors replaced by FakeTensors where the case holds them, and what needs values
named for the one note (:mod:`compile_checks.no_values`).

Apart from :mod:`.run` because it is the one place a case is read for values: :func:`run_case` asks it
once, and skips the write checks, ``verify`` and a full compile by what it answers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the checker imports torch: loading a case file must stay cheap
    from compile_checks.case.definition import Case
    from compile_checks.no_values import NoValues


def without_values(case: Case) -> tuple[Case, NoValues | None]:
    """``(case, None)`` for a case with real tensors; else the case with FakeTensors for its meta tensors
    (its ``fn``, ``compile``, ``driver``, ``reset`` and pools converted in place, ``args`` / ``kwargs`` /
    a pools mapping rebuilt) and the :class:`~compile_checks.no_values.NoValues` its check gets."""
    # lazy: these import torch; loading a case file stays torch-free
    import torch

    from compile_checks.no_values import Storage, no_values
    from compile_checks.pools import resolve_pools

    model = case.fn if isinstance(case.fn, torch.nn.Module) else None
    values = no_values(resolve_pools(case.pools) or {}, case.args, dict(case.kwargs), model)
    if values is None:
        return case, None
    if case.verify is not None:
        values.skip("the case's verify (compiled == eager)")
    if values.storage == Storage.META:
        from compile_checks.needs_values import meta_globals_error

        refused = meta_globals_error([case.fn, case.compile, case.driver])  # left on meta: the compile would fail
        if refused is not None:
            raise refused
        to_fake = values.to_fake()
        for part in (case.fn, case.compile, case.driver, case.reset, case.pools if callable(case.pools) else None):
            to_fake.swap(part)
        pools = case.pools if callable(case.pools) else to_fake.swap(dict(case.pools))
        case = case.replace(args=to_fake.swap(case.args), kwargs=to_fake.swap(dict(case.kwargs)), pools=pools)
    return case, values


@contextlib.contextmanager
def values_needed(values: NoValues | None) -> Iterator[None]:
    """Around the run of a case built without values: torch refusing to read a value (``.item()``,
    ``nonzero``) becomes one :class:`~compile_checks.errors.UsageError` naming the user's line
    (:mod:`compile_checks.needs_values`)."""
    try:
        yield
    except Exception as e:
        if values is None:
            raise
        from compile_checks.needs_values import needs_values_error

        refused = needs_values_error(e, values.built)
        if refused is None:
            raise
        raise refused from e


__all__ = ["values_needed", "without_values"]
