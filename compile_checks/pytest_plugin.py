"""pytest plugin (entry point ``compile_checks``): the ``pool_clone_check`` fixture.

    def test_step_has_no_pool_clones(pool_clone_check):
        pool_clone_check.assert_no_pool_clones(step, k, v, x, slots, pools={"layer0.k": k, "layer0.v": v})

Each check writes its depyf dumps under ``tmp_path/compile_checks/check<N>``; the
failure message names op, argument, pool, bytes and the dump's ``file:line``. Dumps
of passing checks are removed unless ``--keep-compile-dumps`` is given; dumps of
failing checks are always kept.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch


class PoolCloneCheck:
    """What the fixture returns: the library checks, with dumps under the test's tmp_path."""

    def __init__(self, root: Path, keep: bool) -> None:
        self.root = root
        self.keep = keep
        self.reports: list[Any] = []
        self._n = 0

    def _next_dir(self) -> Path:
        d = self.root / f"check{self._n}"
        self._n += 1
        return d

    def analyze(self, fn: Callable[..., Any], *args: Any, pools: Mapping[str, torch.Tensor] | None = None, **kwargs: Any) -> Any:
        """``analyze_pool_clones`` with a dump dir under tmp_path (kept)."""
        from compile_checks.api import analyze_pool_clones

        report = analyze_pool_clones(fn, *args, pools=pools, dump_dir=self._next_dir(), **kwargs)
        self.reports.append(report)
        return report

    def assert_no_pool_clones(
        self, fn: Callable[..., Any], *args: Any, pools: Mapping[str, torch.Tensor] | None = None, **kwargs: Any
    ) -> Any:
        """Fail the test (AssertionError with file:line of each clone) if a pool clone survives."""
        from compile_checks.api import format_report

        dump = self._next_dir()
        from compile_checks.api import analyze_pool_clones

        report = analyze_pool_clones(fn, *args, pools=pools, dump_dir=dump, **kwargs)
        self.reports.append(report)
        if not report.clean:
            raise AssertionError(f"{format_report(report)}\ndumps kept at {dump}")
        if not self.keep:
            shutil.rmtree(dump, ignore_errors=True)
        return report


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compile_checks")
    group.addoption(
        "--keep-compile-dumps",
        action="store_true",
        default=False,
        help="keep depyf dumps of passing pool_clone_check checks too",
    )


@pytest.fixture
def pool_clone_check(tmp_path: Path, request: pytest.FixtureRequest) -> PoolCloneCheck:
    """Checks that compiled code leaves no functionalization clone of the named pools."""
    keep = bool(request.config.getoption("--keep-compile-dumps", default=False))
    return PoolCloneCheck(tmp_path / "compile_checks", keep)
