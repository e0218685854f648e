"""CPU ranks forked from the preloaded server (compile_checks.ranks.forked) see what a fresh rank would.

The first forked launch of a pytest worker starts the server (imports torch, this package and vLLM
once, ~7 s); every rank after that starts in ~0.03 s instead of ~7 s of imports.
"""

from __future__ import annotations

import contextlib
import sys
import types
from pathlib import Path
from unittest import mock

import _ranks_factories as factories
import pytest
import torch

from compile_checks.ranks import RankedCase, forked, run_ranked
from compile_checks.ranks.forked import FORK_ENV, can_fork


@pytest.mark.compile  # each rank compiles its tiny case (analysis-only)
def test_cpu_ranks_are_forked_and_see_their_own_environment_and_group() -> None:
    result = run_ranked(RankedCase("env", factories.sees_a_fresh_ranks_environment, timeout_s=120), analysis_only=True)
    assert result.passed and result.clean is True, result.errors
    assert {rank: r["start"] for rank, r in result.results.items()} == {0: "forked", 1: "forked"}


@pytest.mark.compile  # each rank compiles its tiny case (analysis-only)
def test_ranks_start_fresh_when_forking_is_off_and_the_switch_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control of the test above: the same field reads "fresh" for a fresh interpreter."""
    monkeypatch.setenv(FORK_ENV, "0")
    assert not can_fork("gloo")
    result = run_ranked(RankedCase("env", factories.sees_a_fresh_ranks_environment, timeout_s=120), analysis_only=True)
    assert result.passed, result.errors
    assert {rank: r["start"] for rank, r in result.results.items()} == {0: "fresh", 1: "fresh"}
    monkeypatch.setenv(FORK_ENV, "yes")
    with pytest.raises(ValueError, match=f"{FORK_ENV}='yes'"):
        can_fork("gloo")


def test_nccl_ranks_are_never_forked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FORK_ENV, raising=False)
    assert not can_fork("nccl")  # CUDA is not fork-safe: nccl ranks start fresh
    assert can_fork("gloo") is (not torch.cuda.is_available())  # so is gloo where a CUDA driver is in reach


@pytest.fixture
def script_as_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The launching process's ``__main__`` is a script that, imported again anywhere, appends a line to a file."""
    marks = tmp_path / "imported.txt"
    script = tmp_path / "engine_check.py"
    script.write_text(f"with open({str(marks)!r}, 'a') as f:\n    f.write(__name__ + '\\n')\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    main.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", main)
    return marks


@pytest.mark.compile  # each rank compiles its tiny case (analysis-only)
def test_a_rank_does_not_import_the_launching_script_again(script_as_main: Path) -> None:
    """An engine's check script that runs its ranked case at top level (no ``__name__`` guard) must not run
    again in every rank, which multiprocessing's fork server start does by default."""
    result = run_ranked(RankedCase("tiny", factories.sees_a_fresh_ranks_environment, timeout_s=120), analysis_only=True)
    assert result.passed, result.errors
    assert not script_as_main.exists()


@pytest.mark.compile  # each rank compiles its tiny case (analysis-only)
def test_negative_control_multiprocessings_own_start_imports_the_script_in_every_rank(script_as_main: Path) -> None:
    with mock.patch.object(forked, "_launching_script_hidden", contextlib.nullcontext):
        result = run_ranked(
            RankedCase("tiny", factories.sees_a_fresh_ranks_environment, timeout_s=120), analysis_only=True
        )
    assert result.passed, result.errors
    assert script_as_main.read_text().splitlines() == ["__mp_main__", "__mp_main__"]
