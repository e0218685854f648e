"""``Case``: one thing the gate checks, the user's engine step and the built-in scenarios alike.

A case names the function to compile, how to call it (``args``/``kwargs`` once, or a
``driver`` that runs a host loop over the compiled callable), the pools whose copies
matter, how to compile it (``pipeline``, ``functionalization``, ``dynamic``,
``inductor_config``) and what the verdict must be (``expect_clean``). A negative
control (``expect_clean=False``) that stops cloning is a failure too: the check lost
its power to see the bug.

:func:`run_case` is the only way a case is run: the CLI, the pytest fixture, the
reports and the built-in gate all go through it.

Invariant: a ``Case`` holds the tensors it is checked on; running it writes its pools.
To run the same engine step under several pipelines, build a fresh case per run (a
zero-argument factory returning cases is what the CLI's targets accept).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compile_checks.vocab import FUNCTIONALIZATIONS, PIPELINES

if TYPE_CHECKING:  # torch is imported lazily: loading a case file must stay cheap
    import torch

    from compile_checks.check.findings import CloneReport



@dataclass(frozen=True)
class Case:
    """One compiled step (or host loop) with its pools and the verdict it must get.

    Attributes:
        name: unique within a gate run; used in tables, JUnit test names and report rows.
        fn: the function or ``nn.Module`` to compile (one compiled region per graph dynamo makes).
        args / kwargs: the call when there is no ``driver``: ``compiled(*args, **kwargs)`` once.
        pools: ``{"layer0.k": tensor, ...}``: the buffers whose copies the check attributes.
        expect_clean: True for a case that must keep no pool copy; False for a negative control.
        driver: host loop ``driver(compiled) -> Any`` that calls the compiled callable as the
            engine does (many steps, commits, eviction); its return value is ``CaseResult.output``.
        functionalization: "v1" | "v2"; None takes the pipeline's (stock: v2, vllm: v1).
        dynamic: ``torch.compile(dynamic=...)``.
        inductor_config: ``torch._inductor.config`` patches on top of the pipeline's.
        pipeline: one of :data:`PIPELINES`.
        verify: ``verify(output) -> (matches, max_abs_diff)``: compares the compiled run with
            an eager reference the case owns; None: no numeric check.
        ideal_bytes_per_call: the bytes one call must move at best (reports); None: derived.
        allow_unanalysed: accept regions the check could not analyse (else they fail the case).
        description: one line for tables and reports.
        meta: anything the case's author wants carried to the result (e.g. the built-in Scenario).
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    pools: Mapping[str, torch.Tensor] = field(default_factory=dict)
    expect_clean: bool = True
    driver: Callable[[Callable[..., Any]], Any] | None = None
    functionalization: str | None = None
    dynamic: bool = False
    inductor_config: Mapping[str, Any] = field(default_factory=dict)
    pipeline: str = "stock"
    verify: Callable[[Any], tuple[bool, float]] | None = None
    ideal_bytes_per_call: int | None = None
    allow_unanalysed: bool = False
    description: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Case.name must be a non-empty string, got {self.name!r}")
        if not callable(self.fn):
            raise ValueError(f"Case {self.name!r}: fn must be callable, got {type(self.fn).__name__}")
        if self.driver is not None and not callable(self.driver):
            raise ValueError(f"Case {self.name!r}: driver must be callable or None")
        if self.pipeline not in PIPELINES:
            raise ValueError(f"Case {self.name!r}: pipeline must be one of {PIPELINES}, got {self.pipeline!r}")
        if self.functionalization is not None and self.functionalization not in FUNCTIONALIZATIONS:
            raise ValueError(
                f"Case {self.name!r}: functionalization must be one of {FUNCTIONALIZATIONS} or None, "
                f"got {self.functionalization!r}"
            )
        if not isinstance(self.args, tuple):
            raise ValueError(f"Case {self.name!r}: args must be a tuple, got {type(self.args).__name__}")
        if not isinstance(self.expect_clean, bool):
            raise ValueError(f"Case {self.name!r}: expect_clean must be a bool, got {self.expect_clean!r}")

    def replace(self, **changes: Any) -> Case:
        """A copy with some fields changed (shares the tensors: see the module docstring)."""
        return dataclasses.replace(self, **changes)


@dataclass
class CaseResult:
    """What :func:`run_case` found for one case."""

    case: Case
    report: CloneReport
    output: Any = None
    compile_seconds: float = 0.0
    wall_seconds: float = 0.0
    analysis_only: bool = False
    eager_match: bool | None = None  # None: the case has no ``verify``
    max_abs_diff: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """No pool copy, no check error, nothing unanalysed (unless the case allows it)."""
        return self.report.check_passed

    @property
    def passed(self) -> bool:
        """The verdict matched the expectation, the check had no error or blind spot (unless allowed),
        and the compiled run matched eager (when checked)."""
        return (
            not self.report.problems
            and self.report.clean == self.case.expect_clean
            and self.eager_match is not False
        )


def run_case(
    case: Case,
    *,
    analysis_only: bool = False,
    dump_dir: str | None = None,
) -> CaseResult:
    """Compile ``case.fn`` under the clone check through ``case.pipeline``, run it, report.

    ``analysis_only`` stops Inductor after its post-grad passes (no C++ codegen) and runs
    that graph: the same verdict at a fraction of the cost.
    """
    from compile_checks.api import CloneCheck
    from compile_checks.pipelines import compile_for_pipeline, pipeline_settings

    t0 = time.perf_counter()
    settings = pipeline_settings(case.pipeline)
    check = CloneCheck(
        pools=dict(case.pools) or None,
        functionalization=case.functionalization or settings.functionalization,
        dump_dir=dump_dir,
        inductor_config={**settings.inductor_config, **dict(case.inductor_config)},
        analysis_only=analysis_only,
        allow_unanalysed=case.allow_unanalysed,
    )
    with check:
        compiled = compile_for_pipeline(check, case.fn, case.pipeline, dynamic=case.dynamic)
        output = case.driver(compiled) if case.driver is not None else compiled(*case.args, **dict(case.kwargs))
    report = check.report
    assert report is not None
    report.output = output
    result = CaseResult(
        case=case,
        report=report,
        output=output,
        compile_seconds=sum(r.compile_seconds for r in check.probe.regions),
        analysis_only=analysis_only,
    )
    if case.verify is not None:
        matches, diff = case.verify(output)
        result.eager_match, result.max_abs_diff = bool(matches), float(diff)
        if not matches:
            result.notes.append(f"the compiled run differs from eager (max relative diff {diff:.3g})")
    result.wall_seconds = time.perf_counter() - t0
    return result


__all__ = ["Case", "CaseResult", "run_case"]
