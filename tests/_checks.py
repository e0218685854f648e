"""Assertion helpers shared by the test modules."""

from __future__ import annotations

import fcntl
import functools
import math
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
import torch

if TYPE_CHECKING:
    from compile_checks.case import CaseResult


@functools.cache
def scenario_analysis(name: str) -> CaseResult:
    """One analysis-only run of a built-in scenario per process, shared by every test that reads its
    verdict (the modules asking are grouped on one pytest-xdist worker: _scheduling.CROSS_MODULE_GROUPS)."""
    from compile_checks.case import run_case
    from compile_checks.scenarios import scenario_case

    return run_case(scenario_case(name), analysis_only=True)


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


# A scenario shrunk to its commit graph: one denoising step per chunk, two chunks (the second reads a
# resident window). The generated-code truths and the scan's traces both compile it, so their C++
# kernels are the same sources and the session's kernel store builds each once (another size would be
# another kernel).
COMMIT_GRAPH_ONLY: dict[str, int] = {"denoise_steps": 1, "num_chunks": 2}

T = TypeVar("T")


def session_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder of this test session that every pytest-xdist worker shares (the workers' common parent)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    root.mkdir(exist_ok=True)
    return root


def shared_truth(root: Path, key: str, compute: Callable[[], T]) -> T:
    """``compute()`` once per test session, shared by every pytest-xdist worker (``conftest.truths``).

    The expensive ground truths (full Inductor compiles read for their generated code) are asked for by
    several tests that ``-n 2`` may place on different workers; the first asker computes and pickles
    the plain-data result under the session's shared temporary folder, the others wait on its lock and
    read it. ``compute`` must return picklable plain data (numbers, strings, lists), not tensors.
    """
    path = root / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', key)}.pkl"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            with open(path, "rb") as f:
                return pickle.load(f)  # written by this test session
        value = compute()
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(value, f)
        tmp.replace(path)
        return value


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


# any device's allocation, with or without a device= argument
_ALLOC_ANY = re.compile(r"empty_strided_\w+\(\(([^)]*)\), \([^)]*\), (?:device=[^,]+, )?torch\.(\w+)\)")


def allocated_buffers(code: str) -> list[int]:
    """Bytes of every non-scalar buffer the generated code allocates, sorted."""
    out = []
    for shape, dtype in _ALLOC_ANY.findall(code):
        dims = [int(d) for d in shape.replace(" ", "").split(",") if d]
        if dims:
            out.append(math.prod(dims) * getattr(torch, dtype).itemsize)
    return sorted(out)


def without_generated_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Analysis-only as it was before it settled Inductor's buffer choices: no graph gets its code generated,
    so every site of Inductor's choice stays undecided (a negative control's way to unsettle a check)."""
    from compile_checks.check import backend

    monkeypatch.setattr(backend, "needs_code", lambda sites: False)
