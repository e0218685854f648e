"""``LazyCase``: a case a target declares by name and expectation, and builds only when it runs.

A target factory that builds every :class:`~compile_checks.case.Case` up front (models, pools,
eager references) makes ``compile-checks list`` pay for all of them, and every ``--jobs`` worker or
``--shard`` build them all to run one. A ``LazyCase`` carries what planning needs (name, expectation,
pipeline) and ``build()`` the rest; the built case must agree with the declaration (an error says
where they differ), so a list can never show one expectation and the gate check another.
Torch-free, like loading a case file must be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from compile_checks.case.definition import Case
from compile_checks.case.expectation import Expectation, ExpectClean, normalized_expectation
from compile_checks.errors import CompileChecksError
from compile_checks.vocab import Pipeline, pipeline_named


class LazyCaseError(CompileChecksError, ValueError):
    """``LazyCase.build()`` returned something other than the case it declared."""


@dataclass(frozen=True)
class LazyCase(Expectation):
    """``LazyCase("split", lambda: build_case("split"), expect_clean=True)``: listed without building.

    ``expect_clean`` and ``pipeline`` mean what they mean on :class:`Case` (a mapping pipeline -> bool
    included); ``description`` is shown by ``list``.
    """

    name: str
    build: Callable[[], Case]
    expect_clean: ExpectClean = True
    pipeline: Pipeline = Pipeline.STOCK
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"LazyCase.name must be a non-empty string, got {self.name!r}")
        if not callable(self.build):
            raise ValueError(f"LazyCase {self.name!r}: build must be a zero-argument callable returning a Case")
        object.__setattr__(self, "pipeline", pipeline_named(self.pipeline, f"LazyCase {self.name!r}", ValueError))
        expect, pipeline = normalized_expectation(self.name, self.expect_clean, self.pipeline)
        object.__setattr__(self, "expect_clean", expect)
        object.__setattr__(self, "pipeline", pipeline)

    def materialize(self) -> Case:
        """``build()``, checked against the declaration."""
        case = self.build()
        if not isinstance(case, Case):
            raise LazyCaseError(f"LazyCase {self.name!r}: build() returned {type(case).__name__}, not a Case")
        declared = (self.name, self.expect_clean, self.pipeline)
        built = (case.name, case.expect_clean, case.pipeline)
        if built != declared:
            raise LazyCaseError(
                f"LazyCase {self.name!r} declared (name, expect_clean, pipeline) = {declared!r}, "
                f"but build() returned a Case with {built!r}"
            )
        return case


__all__ = ["LazyCase", "LazyCaseError"]
