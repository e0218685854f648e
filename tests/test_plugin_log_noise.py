"""pytest's log capture stays off ``torch.__trace`` (issue 18.5: a failing check printed ~1355 empty
``DEBUG torch.__trace`` lines, and every compile under pytest formatted structured-trace payloads)."""

from __future__ import annotations

import logging

import pytest
from _pytest.logging import LogCaptureHandler
from torch._logging._internal import trace_log, trace_structured

from compile_checks.gate.log_capture import torch_trace_uncaptured

pytest_plugins = ["pytester"]


def _emit() -> None:
    trace_structured(
        "artifact", metadata_fn=lambda: {"name": "noise_probe", "encoding": "string"}, payload_fn=lambda: ""
    )


def test_detached_inside_the_block_and_back_after() -> None:
    handler = LogCaptureHandler()
    trace_log.addHandler(handler)
    try:
        _emit()
        seen = len(handler.records)  # the artifact and the stack frames it interned
        assert seen >= 1  # negative control: attached, pytest's handler gets torch's records
        with torch_trace_uncaptured():
            assert handler not in trace_log.handlers
            _emit()
        assert len(handler.records) == seen  # nothing reached it inside the block
        assert handler in trace_log.handlers  # put back for pytest's own cleanup
    finally:
        trace_log.removeHandler(handler)


def test_a_handler_that_is_not_pytests_stays() -> None:
    mine = logging.NullHandler()
    trace_log.addHandler(mine)
    try:
        with torch_trace_uncaptured():
            assert mine in trace_log.handlers  # TORCH_TRACE's own, or the user's: not ours to take
    finally:
        trace_log.removeHandler(mine)


USER_TEST = """
import logging
from torch._logging._internal import trace_structured

quiet = logging.getLogger("user.nonpropagating")
quiet.propagate = False

def test_fails():
    trace_structured("artifact", metadata_fn=lambda: {"name": "noise_probe", "encoding": "string"}, payload_fn=lambda: "")
    quiet.warning("the user's own record")
    assert False
"""


def test_a_failing_test_shows_no_torch_trace_lines(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "the user's own record" in out  # negative control: pytest still captures non-propagating loggers
    assert "torch.__trace" not in out
