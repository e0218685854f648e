"""Where a planned case comes from: a :class:`CaseSource` is a picklable recipe for its cases.

A worker process (``--jobs``) or a later pipeline rebuilds cases from the recipe, never from the
objects planning saw, so each pipeline's cases own their tensors when the target is a factory.

Which cases a target's source holds under one pipeline (:func:`runs_under`): a case whose
``expect_clean`` is a mapping runs under each pipeline it names, whatever the gate's pipelines
(they select among its keys, never re-target it); a case with one bool ``expect_clean`` runs under
its own ``pipeline``, or, when the gate names pipelines (``--pipeline``, ``[tool.compile_checks]
pipelines``), under each of those (``retarget``).
"""

from __future__ import annotations

from dataclasses import dataclass

from compile_checks.case import Case
from compile_checks.gate.targets import Declared, declared_cases
from compile_checks.lazy_case import LazyCase
from compile_checks.ranks.spec import RankedCase
from compile_checks.vocab import Pipeline

BUILTIN = "builtin"
TARGET = "target"


def runs_under(case: Declared, pipeline: Pipeline, *, retarget: bool, own_pipeline: bool = False) -> bool:
    """Whether ``case`` is checked under ``pipeline`` (module docstring); ``own_pipeline``: only under
    the case's own ``pipeline`` (``dump`` without ``--pipeline`` compiles each case once)."""
    if own_pipeline:
        return case.pipeline == pipeline
    named = case.expected_pipelines
    if named is not None:
        return pipeline in named
    return retarget or case.pipeline == pipeline


@dataclass(frozen=True)
class CaseSource:
    """Where cases come from; ``declared()`` names them, ``build()`` makes one runnable."""

    kind: str  # BUILTIN | TARGET
    spec: str = ""  # the target ("file.py:NAME" / "pkg.mod:NAME"); unused for BUILTIN
    base_dir: str = ""  # relative file targets are taken from here
    pipeline: Pipeline | None = None  # the pipeline this source's cases run under (BUILTIN: None is stock)
    names: tuple[str, ...] = ()  # BUILTIN: the scenario names
    smoke: bool = False  # BUILTIN: the codegen smoke's commit-graph-only variants
    retarget: bool = False  # TARGET: single-expectation cases of other pipelines re-run under ``pipeline``
    own_pipeline: bool = False  # TARGET: each case only under its own ``pipeline`` (:func:`runs_under`)

    def declared(self) -> list[Declared]:
        """The cases this source runs, a ``LazyCase`` not yet built (every built-in case is one)."""
        if self.kind == BUILTIN:  # declared from the registry, built when run
            from compile_checks.scenarios.declared import declared_builtin, declared_smoke  # lazy: imports torch

            if self.smoke:
                return list(declared_smoke(self.names))
            return list(declared_builtin(self.names, self.pipeline or Pipeline.STOCK))
        cases = declared_cases(self.spec, self.base_dir or None)
        if self.pipeline is None:
            return cases
        pipeline, retarget, own = self.pipeline, self.retarget, self.own_pipeline
        return [c for c in cases if runs_under(c, pipeline, retarget=retarget, own_pipeline=own)]

    def build(self, case: Declared) -> Case | RankedCase:
        """``case`` built and on this source's pipeline.

        A ``Case`` instance target is re-targeted in place of a fresh build: the copy shares the
        tensors (running it under two pipelines writes the same pools twice); a factory target is
        called again per pipeline (per source) and gets its own tensors.
        """
        built = case.materialize() if isinstance(case, LazyCase) else case
        if self.pipeline is None or built.pipeline == self.pipeline:
            return built
        return built.replace(pipeline=self.pipeline)

    def load(self) -> list[Case | RankedCase]:
        """Every case of this source, built."""
        return [self.build(c) for c in self.declared()]


__all__ = ["BUILTIN", "TARGET", "CaseSource", "runs_under"]
