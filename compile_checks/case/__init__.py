"""``Case``: one thing the gate checks, the user's engine step and the built-in scenarios alike.

A case names the function to compile, how to call it (``args``/``kwargs`` once, or a
``driver`` that runs a host loop over the compiled callable), the pools whose copies
matter, how to compile it (``pipeline``, ``functionalization``, ``dynamic``,
``inductor_config``) and what the verdict must be (``expect_clean``). A negative
control (``expect_clean=False``) that stops cloning is a failure too: the check lost
its power to see the bug.

:func:`run_case` is the only way a case is run: the gate, the pytest plugin's ``check``,
the reports and the built-in scenarios all go through it; the plugin's ``session`` (a host
loop the test writes inline) opens the same :func:`check_session` and reads the same
:class:`CaseResult`. Whether a result met its expectation is :mod:`compile_checks.verdict`'s.

Invariant: a ``Case`` holds the tensors it is checked on; running it writes its pools.
To run the same engine step under several pipelines, build a fresh case per run (a
zero-argument factory returning cases is what the CLI's targets accept).

Modules: :mod:`.expectation` (``expect_clean`` per pipeline), :mod:`.definition` (the
:class:`Case` dataclass), :mod:`.run` (:func:`run_case`, :func:`check_session`, :class:`CaseResult`),
:mod:`.run_findings` (when the write check runs, recompiles). The names below are the package's public face.
"""

from __future__ import annotations

from compile_checks.case.definition import Case, pipeline_label
from compile_checks.case.expectation import Expectation, ExpectClean, normalized_expectation
from compile_checks.case.run import CaseResult, case_result, check_session, run_case
from compile_checks.case.run_findings import checks_writes, run_findings

__all__ = [
    "Case",
    "CaseResult",
    "ExpectClean",
    "Expectation",
    "case_result",
    "check_session",
    "checks_writes",
    "normalized_expectation",
    "pipeline_label",
    "run_case",
    "run_findings",
]
