"""The :class:`Case` dataclass: what to compile, how to call it, its pools, and the verdict it must get.

Apart from running it (:mod:`.run`) because a case file only builds cases: loading one must stay
cheap and torch-free (see the package docstring for the invariant a case keeps).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compile_checks.case.expectation import Expectation, ExpectClean, normalized_expectation
from compile_checks.pipelines import EngineCompile, pipeline_of
from compile_checks.vocab import FUNCTIONALIZATIONS, Functionalization, Pipeline, pipeline_named

if TYPE_CHECKING:  # torch is imported lazily: loading a case file must stay cheap
    import torch


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
        dynamic: ``torch.compile(dynamic=...)``; None (the default, as ``torch.compile``'s): static sizes
            first, a size that changes recompiles once as symbolic.
        inductor_config: ``torch._inductor.config`` patches on top of the pipeline's (None: none).
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
        check_writes: with a ``driver`` or ``verify``, check every compiled call's writes: the region's
            captured graph runs eagerly on the call's own inputs (its writes undone, RNG state put back),
            then the compiled code, and a pool element the compiled call left different fails
            (``lost_write``; ``diverged_state`` when the two did not start from the same state). The host
            loop runs once; False turns the check off.
        max_recompiles: fail when dynamo recompiled a function more often than this; None: no limit.
        reset: ``reset() -> None``, called once before the run. The write check no longer needs it (it
            never replays the host loop); kept for drivers that want their state set up by the case.
        inductor_cache: also run the case against the Inductor / AOTAutograd caches in this directory
            (``gate --inductor-cache DIR``, which takes precedence): fail when the artifact they serve
            copies other bytes than a cold compile (``cache_divergence``); None: the cold verdict only.
        no_grad: run the step (the call, or the ``driver``, eager reference included) under
            ``torch.no_grad()``, as an engine runs inference: an ``nn.Module`` built as usual has parameters
            that require grad, and a step without its own ``torch.no_grad()`` would make dynamo trace a
            training graph. False: the step runs with autograd as the caller left it.
        fail_on_program_copies: fail on the pool-sized buffers the program itself makes from a pool (a roll of
            a ring cache, a copy of the window as an attention input: ``program_copy``); False (the default):
            reported with their bytes per call, never failing (``gate --fail-on-program-copies`` sets it).
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    pools: Mapping[str, torch.Tensor] | Callable[[], Mapping[str, torch.Tensor]] = field(default_factory=dict)
    expect_clean: ExpectClean = True
    driver: Callable[[Callable[..., Any]], Any] | None = None
    functionalization: Functionalization | None = None
    dynamic: bool | None = None
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
    reset: Callable[[], Any] | None = None
    inductor_cache: str | os.PathLike[str] | None = None
    no_grad: bool = True
    fail_on_program_copies: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Case.name must be a non-empty string, got {self.name!r}")
        if not callable(self.fn):
            raise ValueError(f"Case {self.name!r}: fn must be callable, got {type(self.fn).__name__}")
        if self.driver is not None and not callable(self.driver):
            raise ValueError(f"Case {self.name!r}: driver must be callable or None")
        object.__setattr__(self, "pipeline", pipeline_named(self.pipeline, f"Case {self.name!r}", ValueError))
        if self.functionalization is not None:
            try:
                object.__setattr__(self, "functionalization", Functionalization(self.functionalization))
            except ValueError:
                raise ValueError(
                    f"Case {self.name!r}: functionalization must be one of {FUNCTIONALIZATIONS} or None, "
                    f"got {self.functionalization!r}"
                ) from None
        if self.dynamic is not None and not isinstance(self.dynamic, bool):
            raise ValueError(f"Case {self.name!r}: dynamic must be True, False or None, got {self.dynamic!r}")
        if self.inductor_config is None:  # as torch.compile(options=None): no patches
            object.__setattr__(self, "inductor_config", {})
        elif not isinstance(self.inductor_config, Mapping):
            raise ValueError(
                f"Case {self.name!r}: inductor_config must be a mapping of torch._inductor.config patches or None, "
                f"got {type(self.inductor_config).__name__}"
            )
        if not isinstance(self.args, tuple):
            raise ValueError(f"Case {self.name!r}: args must be a tuple, got {type(self.args).__name__}")
        if self.reset is not None and not callable(self.reset):
            raise ValueError(f"Case {self.name!r}: reset must be callable (called before the run) or None")
        if self.compile is not None and not callable(self.compile):
            raise ValueError(f"Case {self.name!r}: compile must be callable (it receives the check's backend) or None")
        if (self.fullgraph or self.mode is not None) and self.compile is not None:
            raise ValueError(
                f"Case {self.name!r}: fullgraph / mode are for the plain compile; with Case.compile pass them to "
                "your own torch.compile"
            )
        expect, pipeline = normalized_expectation(self.name, self.expect_clean, self.pipeline)
        if self.compile is not None and not pipeline_of(pipeline).engine_compile:
            raise ValueError(f"Case {self.name!r}: compile cannot be combined with the {pipeline} pipeline")
        object.__setattr__(self, "expect_clean", expect)
        object.__setattr__(self, "pipeline", pipeline)
        if self.inductor_cache is not None:
            if not isinstance(self.inductor_cache, (str, os.PathLike)):
                raise ValueError(f"Case {self.name!r}: inductor_cache must be a directory path or None")
            object.__setattr__(self, "inductor_cache", os.fspath(self.inductor_cache))
        if not isinstance(self.no_grad, bool):
            raise ValueError(f"Case {self.name!r}: no_grad must be True or False, got {self.no_grad!r}")
        if self.max_recompiles is not None and (not isinstance(self.max_recompiles, int) or self.max_recompiles < 0):
            raise ValueError(
                f"Case {self.name!r}: max_recompiles must be an int >= 0 or None, got {self.max_recompiles!r}"
            )

    def grad_mode(self) -> contextlib.AbstractContextManager[Any]:
        """What the step runs under: ``torch.no_grad()`` (the default, an engine's inference), or nothing."""
        if not self.no_grad:
            return contextlib.nullcontext()
        import torch  # lazy: loading a case file stays torch-free

        return torch.no_grad()

    def replace(self, **changes: Any) -> Case:
        """A copy with some fields changed (shares the tensors: see the module docstring)."""
        return dataclasses.replace(self, **changes)


def pipeline_label(name: str, pipeline: Pipeline) -> str:
    """``name`` on the stock pipeline, ``name[vllm]`` on another: the one label style of tables,
    JUnit test names, dump folders and the built-in cases' names (a name already labelled stays). An unknown
    pipeline is a ValueError naming the case and the pipelines."""
    return pipeline_of(pipeline_named(pipeline, f"case {name!r}")).label(name)


__all__ = ["Case", "pipeline_label"]
