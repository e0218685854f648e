"""The verdict a case must get, per pipeline: ``expect_clean`` as a bool or a ``{Pipeline: bool}`` mapping.

Apart from :class:`~compile_checks.case.definition.Case` because ``LazyCase`` (which builds no
tensors up front) validates and answers the same expectation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compile_checks.pipelines.kinds import pipeline_of
from compile_checks.vocab import PIPELINES, Pipeline

ExpectClean = bool | Mapping[Pipeline, bool]


def normalized_expectation(
    name: str, expect: bool | Mapping[Any, Any], pipeline: Pipeline
) -> tuple[ExpectClean, Pipeline]:
    """``expect_clean`` as a bool or a non-empty ``{Pipeline: bool}``, and the case's pipeline: one of the
    mapping's keys (the stock default becomes the first key; another pipeline the mapping lacks is an error)."""
    if isinstance(expect, bool):
        return expect, pipeline
    if not isinstance(expect, Mapping) or not expect:
        raise ValueError(
            f"Case {name!r}: expect_clean must be a bool or a non-empty mapping pipeline -> bool, got {expect!r}"
        )
    unknown = [p for p in expect if p not in PIPELINES]
    if unknown:
        raise ValueError(
            f"Case {name!r}: expect_clean names unknown pipeline(s) {', '.join(map(repr, unknown))}; "
            f"valid: {', '.join(PIPELINES)}"
        )
    if not all(isinstance(v, bool) for v in expect.values()):
        raise ValueError(f"Case {name!r}: expect_clean's values must be bools, got {expect!r}")
    per_pipeline = {Pipeline(p): v for p, v in expect.items()}
    if pipeline in per_pipeline:
        return per_pipeline, pipeline
    if not pipeline_of(pipeline).default:  # the default pipeline is also the field's: then the mapping's first key
        raise ValueError(
            f"Case {name!r}: pipeline {pipeline} has no expectation in expect_clean (names {', '.join(per_pipeline)})"
        )
    return per_pipeline, next(iter(per_pipeline))


class Expectation:
    """The verdict a case must get, per pipeline: shared by :class:`Case` and ``LazyCase``."""

    name: str
    expect_clean: ExpectClean
    pipeline: Pipeline

    @property
    def expected_pipelines(self) -> tuple[Pipeline, ...] | None:
        """The pipelines an ``expect_clean`` mapping names (the case runs only there); None for a bool."""
        return None if isinstance(self.expect_clean, bool) else tuple(self.expect_clean)

    def expects_clean_on(self, pipeline: Pipeline | str) -> bool:
        """The verdict under ``pipeline`` (a bool ``expect_clean`` holds for every pipeline)."""
        if isinstance(self.expect_clean, bool):
            return self.expect_clean
        if pipeline not in self.expect_clean:
            raise ValueError(
                f"Case {self.name!r}: no expectation for pipeline {pipeline} "
                f"(expect_clean names {', '.join(self.expect_clean)})"
            )
        return self.expect_clean[Pipeline(pipeline)]

    @property
    def expects_clean(self) -> bool:
        """The verdict under the case's own ``pipeline``."""
        return self.expects_clean_on(self.pipeline)


__all__ = ["ExpectClean", "Expectation", "normalized_expectation"]
