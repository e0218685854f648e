"""The check's backend survives the copies engines make of it (transformers' ``generate()`` path).

transformers' ``CompileConfig.to_dict()`` deep-copies its fields, ``backend`` included, on every
``generate()``, and ``torch.compile(model.__call__, **config.to_dict())`` gets the copy. A bound
method deep-copies its ``self``: the copy records into a copy of the probe and the check reports
"no compiled region". ``check.backend`` is one object per probe that ``copy`` / ``deepcopy`` /
``pickle`` (in this process) return unchanged. Negative control: a plain deep-copied bound method
of the probe still records nothing, and the report names the cause.
"""

from __future__ import annotations

import copy
import os
import pickle

import pytest
import torch

from compile_checks.api import CloneCheck
from compile_checks.check.backend_object import _pickled_backend

pytestmark = pytest.mark.compile


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # lowered to an extern mm kernel: a full compile (the negative control's copied probe) builds no C++
    return torch.mm(a, b)


def _args() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 4), torch.randn(4, 4)


def test_copies_of_the_backend_are_the_backend() -> None:
    check = CloneCheck(analysis_only=True)
    backend = check.backend
    assert copy.deepcopy(backend) is backend and copy.copy(backend) is backend
    assert copy.deepcopy({"backend": backend})["backend"] is backend  # as CompileConfig.to_dict() copies it
    assert pickle.loads(pickle.dumps(backend)) is backend
    assert check.backend is backend and check.probe.backend is backend  # one object per probe


def test_a_deep_copied_backend_still_records() -> None:
    with CloneCheck(analysis_only=True) as check:
        compiled = torch.compile(_matmul, backend=copy.deepcopy(check.backend))
        compiled(*_args())
    assert check.report is not None
    assert check.report.num_regions == 1 and check.report.check_passed, check.report.errors


def test_transformers_compile_config_reaches_the_check() -> None:
    compile_config = pytest.importorskip("transformers").CompileConfig  # in the lock (vLLM's pin)
    with CloneCheck(analysis_only=True) as check:
        config = compile_config(backend=check.backend, fullgraph=True)
        options = config.to_dict()  # what generate() passes to torch.compile (mode="reduce-overhead" included)
        assert options["backend"] is check.backend
        torch.compile(_matmul, **options)(*_args())
    assert check.report is not None and check.report.num_regions == 1, check.report.errors


def test_negative_control_a_deep_copied_bound_method_records_nothing() -> None:
    with CloneCheck(analysis_only=True) as check:
        method = copy.deepcopy(check.probe.compile_region)  # what deep-copying the old bound-method backend gave
        assert method.__self__ is not check.probe
        torch.compile(_matmul, backend=method)(*_args())
    report = check.report
    assert report is not None and report.num_regions == 0 and not report.check_passed
    (error,) = report.errors
    assert error.startswith("no compiled region") and "deep-copied" in error and "CompileConfig" in error, error


def test_negative_control_a_backend_pickled_elsewhere_does_not_unpickle() -> None:
    backend = CloneCheck(analysis_only=True).backend
    _, (pid, key) = backend.__reduce__()
    assert _pickled_backend(pid, key) is backend
    with pytest.raises(pickle.UnpicklingError, match="only be unpickled in the process that pickled it"):
        _pickled_backend(os.getpid() + 1, key)
