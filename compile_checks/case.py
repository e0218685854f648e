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
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compile_checks import verdict
from compile_checks.pipelines import EngineCompile, compile_for_pipeline, resolve
from compile_checks.vocab import FUNCTIONALIZATIONS, PIPELINES, Functionalization, Pipeline

if TYPE_CHECKING:  # torch is imported lazily: loading a case file must stay cheap
    import torch

    from compile_checks.api import CloneCheck
    from compile_checks.check.findings import CloneReport


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
    if pipeline != Pipeline.STOCK:  # stock is also the field's default: then the mapping's first key
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


@dataclass(frozen=True)
class Case(Expectation):
    """One compiled step (or host loop) with its pools and the verdict it must get.

    Attributes:
        name: unique within a gate run; used in tables, JUnit test names and report rows.
        fn: the function or ``nn.Module`` to compile (one compiled region per graph dynamo makes).
        args / kwargs: the call when there is no ``driver``: ``compiled(*args, **kwargs)`` once.
        pools: ``{"layer0.k": tensor, ...}``: the buffers whose copies the check attributes; or a
            zero-argument callable returning it, re-read by the check so rebuilt tensors are followed
            (:mod:`compile_checks.pools` names them from module trees, cache objects, vLLM's
            forward context). A tensor named twice, or two names that overlap, is an error.
        expect_clean: True for a case that must keep no pool copy; False for a negative control; or a
            mapping pipeline -> bool (``{"stock": True, "vllm": False}``): the verdict per pipeline, and the
            pipelines the gate runs the case under (its ``pipelines`` select among them, never re-target it).
            ``pipeline`` must be one of the keys (default: the first).
        driver: host loop ``driver(compiled) -> Any`` that calls the compiled callable as the
            engine does (many steps, commits, eviction); its return value is ``CaseResult.output``.
        functionalization: "v1" | "v2" (kept as a :class:`Functionalization`); None takes the
            pipeline's (stock: v2, vllm: v1).
        dynamic: ``torch.compile(dynamic=...)``.
        inductor_config: ``torch._inductor.config`` patches on top of the pipeline's.
        pipeline: one of :data:`PIPELINES`, kept as a :class:`Pipeline` (the one place a
            pipeline name is validated: everything downstream takes the enum).
        verify: ``verify(output) -> (matches, max_abs_diff)``: compares the compiled run with
            an eager reference the case owns; None: no numeric check.
        ideal_bytes_per_call: the bytes one call must move at best (reports); None: derived.
        allow_unanalysed: accept regions the check could not analyse (else they fail the case).
        description: one line for tables and reports.
        meta: anything the case's author wants carried to the result (e.g. the built-in Scenario).
        compile: the engine's own compile step, ``compile(backend) -> callable | None``: it gets the
            check's dynamo backend and compiles as the engine does in production (per block:
            ``block.forward = torch.compile(block.forward, backend=backend, fullgraph=True)``;
            vLLM-Omni's ``regionally_compile(model, backend=backend)``) and returns what the driver
            calls, or None when it compiled ``fn``'s parts in place (the driver then calls ``fn``).
            Every region compiled through ``backend`` is analysed. None: ``torch.compile(fn)``.
        fullgraph / mode: ``torch.compile(fn, fullgraph=..., mode=...)`` of the plain compile (stock and
            vllm pipelines; a ``@support_torch_compile`` module compiles with vLLM's own settings; with
            ``compile`` the engine passes its own).
        check_writes: with a ``driver`` or ``verify``, also run the case eagerly first (state restored)
            and fail a pool the compiled run left different (``lost_write``); False for a driver
            that cannot run twice.
        max_recompiles: fail when dynamo recompiled a function more often than this; None: no limit.
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    pools: Mapping[str, torch.Tensor] | Callable[[], Mapping[str, torch.Tensor]] = field(default_factory=dict)
    expect_clean: ExpectClean = True
    driver: Callable[[Callable[..., Any]], Any] | None = None
    functionalization: Functionalization | None = None
    dynamic: bool = False
    inductor_config: Mapping[str, Any] = field(default_factory=dict)
    pipeline: Pipeline = Pipeline.STOCK
    verify: Callable[[Any], tuple[bool, float]] | None = None
    ideal_bytes_per_call: int | None = None
    allow_unanalysed: bool = False
    description: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    compile: EngineCompile | None = None
    fullgraph: bool = False
    mode: str | None = None
    check_writes: bool = True
    max_recompiles: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Case.name must be a non-empty string, got {self.name!r}")
        if not callable(self.fn):
            raise ValueError(f"Case {self.name!r}: fn must be callable, got {type(self.fn).__name__}")
        if self.driver is not None and not callable(self.driver):
            raise ValueError(f"Case {self.name!r}: driver must be callable or None")
        try:
            object.__setattr__(self, "pipeline", Pipeline(self.pipeline))
        except ValueError:
            raise ValueError(
                f"Case {self.name!r}: pipeline {self.pipeline!r} is not one of the pipelines {', '.join(PIPELINES)}"
            ) from None
        if self.functionalization is not None:
            try:
                object.__setattr__(self, "functionalization", Functionalization(self.functionalization))
            except ValueError:
                raise ValueError(
                    f"Case {self.name!r}: functionalization must be one of {FUNCTIONALIZATIONS} or None, "
                    f"got {self.functionalization!r}"
                ) from None
        if not isinstance(self.args, tuple):
            raise ValueError(f"Case {self.name!r}: args must be a tuple, got {type(self.args).__name__}")
        if self.compile is not None and not callable(self.compile):
            raise ValueError(f"Case {self.name!r}: compile must be callable (it receives the check's backend) or None")
        if (self.fullgraph or self.mode is not None) and self.compile is not None:
            raise ValueError(
                f"Case {self.name!r}: fullgraph / mode are for the plain compile; with Case.compile pass them to "
                "your own torch.compile"
            )
        if self.compile is not None and self.pipeline == Pipeline.VLLM_PIECEWISE:
            raise ValueError(f"Case {self.name!r}: compile cannot be combined with the vllm-piecewise pipeline")
        expect, pipeline = normalized_expectation(self.name, self.expect_clean, self.pipeline)
        object.__setattr__(self, "expect_clean", expect)
        object.__setattr__(self, "pipeline", pipeline)
        if self.max_recompiles is not None and (not isinstance(self.max_recompiles, int) or self.max_recompiles < 0):
            raise ValueError(
                f"Case {self.name!r}: max_recompiles must be an int >= 0 or None, got {self.max_recompiles!r}"
            )

    def replace(self, **changes: Any) -> Case:
        """A copy with some fields changed (shares the tensors: see the module docstring)."""
        return dataclasses.replace(self, **changes)


def pipeline_label(name: str, pipeline: Pipeline) -> str:
    """``name`` on the stock pipeline, ``name[vllm]`` on another: the one label style of tables,
    JUnit test names, dump folders and the built-in cases' names (a name already labelled stays)."""
    return name if pipeline == Pipeline.STOCK or name.endswith(f"[{pipeline}]") else f"{name}[{pipeline}]"


@dataclass
class CaseResult:
    """What :func:`run_case` (or a plugin session) found for one case."""

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
    def check_passed(self) -> bool:
        """No pool copy, no check error, nothing unanalysed (unless the case allows it)."""
        return self.report.check_passed

    @property
    def verdict_met(self) -> bool:
        """The copy verdict is ``case.expects_clean``, from a usable check (:func:`verdict.verdict_met`)."""
        return verdict.verdict_met(
            expect_clean=self.case.expects_clean, clean=self.report.clean, problems=self.report.problems
        )

    @property
    def passed(self) -> bool:
        """The verdict met, and the compiled run matched eager (when checked)."""
        return verdict.case_passed(
            expect_clean=self.case.expects_clean,
            clean=self.report.clean,
            problems=self.report.problems,
            eager_match=self.eager_match,
        )

    def failure_reasons(self, copies_listed: bool = False) -> list[str]:
        """Why the case did not pass (:func:`verdict.failure_reasons`); empty when it passed."""
        report = self.report
        return verdict.failure_reasons(
            expect_clean=self.case.expects_clean,
            clean=report.clean,
            problems=report.problems,
            copies=[verdict.copy_fields(c) for c in [*report.clones, *report.other_clones]],
            eager_match=self.eager_match,
            max_abs_diff=self.max_abs_diff,
            copies_listed=copies_listed,
            pipeline=self.case.pipeline,
        )


def check_session(case: Case, *, analysis_only: bool = False, dump_dir: str | None = None) -> CloneCheck:
    """The (not yet entered) check session ``case`` is compiled under: its pools, and the pipeline's
    settings with the case's overrides (:func:`compile_checks.pipelines.resolve`)."""
    from compile_checks.api import CloneCheck  # lazy: api imports torch; loading a case file stays torch-free

    settings = resolve(case)
    return CloneCheck(
        pools=case.pools if callable(case.pools) else (dict(case.pools) or None),
        functionalization=settings.functionalization,
        dump_dir=dump_dir,
        inductor_config=settings.inductor_config,
        analysis_only=analysis_only,
        allow_unanalysed=case.allow_unanalysed,
    )


def case_result(case: Case, check: CloneCheck, output: Any, *, started: float) -> CaseResult:
    """The result of ``case`` once ``check`` has closed: its report, and compiled == eager via ``verify``."""
    report = check.report
    assert report is not None, "case_result needs a closed check session"
    report.output = output
    result = CaseResult(
        case=case,
        report=report,
        output=output,
        compile_seconds=sum(r.compile_seconds for r in check.probe.regions),
        analysis_only=check.probe.analysis_only,
    )
    if case.verify is not None:
        matches, diff = case.verify(output)
        result.eager_match, result.max_abs_diff = bool(matches), float(diff)
    result.wall_seconds = time.perf_counter() - started
    return result


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
    started = time.perf_counter()
    check = check_session(case, analysis_only=analysis_only, dump_dir=dump_dir)
    # lost writes: an eager run from a snapshot (restored in place) to compare the pools with
    reference = write_reference(case)
    with check:
        compiled = compile_for_pipeline(
            check,
            case.fn,
            case.pipeline,
            dynamic=case.dynamic,
            fullgraph=case.fullgraph,
            mode=case.mode,
            engine_compile=case.compile,
        )
        output = case.driver(compiled) if case.driver is not None else compiled(*case.args, **dict(case.kwargs))
    assert check.report is not None
    check.report.run_findings += run_findings(case, check.report, reference)
    return case_result(case, check, output, started=started)


def write_reference(case: Case) -> Any:
    """The eager reference for the lost-write check (compile_checks.check.writes), or None when it is off."""
    if not case.check_writes or (case.driver is None and case.verify is None):
        return None
    from compile_checks.check.writes import eager_reference, tensors_in
    from compile_checks.pools import resolve_pools

    pools = resolve_pools(case.pools) or {}  # a pools callable is read here, before the eager run
    if not pools:
        return None

    fn, context = _eager(case)

    def run() -> Any:
        with context():
            return case.driver(fn) if case.driver is not None else fn(*case.args, **dict(case.kwargs))

    try:
        return eager_reference(pools, tensors_in(case.args, dict(case.kwargs), case.fn), run)
    except Exception as e:  # the state is restored; the case fails with the reason
        return (
            f"the eager reference run of the lost-write check failed ({type(e).__name__}: {e}); "
            "Case(check_writes=False) skips it for a case that cannot run eagerly or twice"
        )


def _eager(case: Case) -> tuple[Callable[..., Any], Callable[[], contextlib.AbstractContextManager[Any]]]:
    """``case.fn`` as eager code and the context it runs in (vLLM's env and config on its pipelines).

    A ``@support_torch_compile`` module's ``forward`` is its eager code (calling the module compiles it).
    """
    if str(case.pipeline) == "stock":
        return case.fn, contextlib.nullcontext
    from compile_checks.pipelines.vllm import is_vllm_compiled_module
    from compile_checks.pipelines.vllm_env import vllm_env, vllm_module

    config = getattr(case.fn, "vllm_config", None)

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        with vllm_env():
            if config is None:
                yield
                return
            with vllm_module("vllm.config").set_current_vllm_config(config):
                yield

    fn: Callable[..., Any] = case.fn.forward if is_vllm_compiled_module(case.fn) else case.fn  # type: ignore[attr-defined]
    return fn, context


def run_findings(case: Case, report: CloneReport, reference: Any) -> list[Any]:
    """Lost writes against the eager reference, and functions over ``max_recompiles``."""
    from compile_checks.check.recompiles import recompile_findings

    if isinstance(reference, str):
        report.errors.append(reference)
        reference = None
    if reference is not None:
        from compile_checks.pools import resolve_pools

        found = list(reference.compare(resolve_pools(case.pools) or {}))
    else:
        found = []
    return found + recompile_findings(report.recompiles, case.max_recompiles)


__all__ = [
    "Case",
    "CaseResult",
    "ExpectClean",
    "Expectation",
    "case_result",
    "check_session",
    "normalized_expectation",
    "pipeline_label",
    "run_case",
]
