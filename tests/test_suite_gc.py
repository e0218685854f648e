"""The workers' garbage-collector settings (_gc_tuning): applied to this session, off under the switch."""

from __future__ import annotations

import gc
import os
from unittest import mock

import pytest
import torch  # noqa: F401  # collected with this module, as in the whole suite: the frozen heap holds torch
from _gc_tuning import GC_ENV, THRESHOLDS, tune_gc


@pytest.mark.skipif(os.environ.get(GC_ENV) == "0", reason=f"{GC_ENV}=0: this session keeps Python's defaults")
def test_this_session_runs_with_the_heap_frozen_and_the_thresholds_raised() -> None:
    assert gc.get_freeze_count() > 100_000  # torch alone is more; the tests' own objects come later
    assert gc.get_threshold() == THRESHOLDS
    assert gc.isenabled()


def gc_calls_of_tuning(environ: dict[str, str]) -> tuple[bool, list]:
    """``tune_gc(environ)``'s result and the collector calls it made (recorded, not made)."""
    calls = mock.Mock()
    with (
        mock.patch.object(gc, "collect", calls.collect),
        mock.patch.object(gc, "freeze", calls.freeze),
        mock.patch.object(gc, "set_threshold", calls.set_threshold),
    ):
        tuned = tune_gc(environ)
    return tuned, calls.mock_calls


def test_tuning_collects_then_freezes_then_raises_the_thresholds() -> None:
    assert gc_calls_of_tuning({}) == (
        True,
        [mock.call.collect(), mock.call.freeze(), mock.call.set_threshold(*THRESHOLDS)],
    )


def test_switched_off_nothing_changes() -> None:
    """Negative control: under ``TESTS_GC_TUNE=0`` the same check sees no call at all."""
    assert gc_calls_of_tuning({GC_ENV: "0"}) == (False, [])
