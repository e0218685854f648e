"""Public entry points: compile a function with the instrumented backend, run it once, report.

``analyze_pool_clones`` / ``find_pool_clones`` / ``assert_no_pool_clones`` check one
call of ``fn``; :class:`CloneCheck` (:mod:`compile_checks.session`) is the session they are built
on, for callers (like the scenarios) that drive a compiled region many times from a host loop.
A thin facade: no core module imports it (an import-linter contract); every public name stays
importable from here and from ``compile_checks``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from compile_checks.check.findings import CloneReport, SurvivingClone
from compile_checks.explain.report_text import format_report
from compile_checks.no_values import Storage, no_values
from compile_checks.session import CloneCheck, CompileCheckError, callable_name, first_line


def analyze_pool_clones(
    fn: Callable[..., Any],
    *args: Any,
    pools: Mapping[str, torch.Tensor] | None = None,
    dynamic: bool = False,
    functionalization: str = "v2",
    dump_dir: str | os.PathLike[str] | None = None,
    inductor_config: Mapping[str, Any] | None = None,
    analysis_only: bool = False,
    allow_unanalysed: bool = False,
    **kwargs: Any,
) -> CloneReport:
    """Compile ``fn`` with Inductor, run it once on ``args`` (pools really written), and report
    every functionalization clone of a mutated caller tensor that survived reinplacing.

    ``pools`` names the caller's buffers (``{"layer0.k": k, ...}``) so clones are attributed
    by storage; without it every mutated graph input counts (``pool=None``).
    ``report.output`` is what ``fn`` returned. ``inductor_config`` adds torch._inductor.config
    patches for the check (e.g. ``{"reorder_for_locality": False}``). ``analysis_only`` stops
    Inductor after its post-grad passes (same verdict, no codegen); ``allow_unanalysed``
    accepts regions the check could not analyse. A model, pools and args built on ``meta`` or under
    ``FakeTensorMode`` get the analysis-only verdict (:mod:`compile_checks.no_values`).
    """
    values = no_values(dict(pools or {}), args, kwargs, fn)
    if values is not None and values.storage == Storage.META:  # meta -> FakeTensors, in place
        to_fake = values.to_fake()
        fn, args, kwargs = to_fake.swap(fn), to_fake.swap(args), to_fake.swap(kwargs)
        pools = to_fake.swap(dict(pools)) if pools is not None else None
    check = CloneCheck(
        pools=pools,
        functionalization=functionalization,
        dump_dir=dump_dir,
        inductor_config=inductor_config,
        analysis_only=analysis_only,
        allow_unanalysed=allow_unanalysed,
        values=values,
    )
    with check:
        output = check.compile(fn, dynamic=dynamic)(*args, **kwargs)
    assert check.report is not None
    check.report.output = output
    return check.report


def dump(
    fn: Callable[..., Any],
    *args: Any,
    out_dir: str | os.PathLike[str],
    pools: Mapping[str, torch.Tensor] | None = None,
    dynamic: bool = False,
    functionalization: str = "v2",
    inductor_config: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> CloneReport:
    """Run ``fn`` once under ``depyf.prepare_debug(out_dir)``; write ``out_dir/index.md``; return the report."""
    return analyze_pool_clones(
        fn,
        *args,
        pools=pools,
        dynamic=dynamic,
        functionalization=functionalization,
        dump_dir=out_dir,
        inductor_config=inductor_config,
        **kwargs,
    )


def find_pool_clones(
    fn: Callable[..., Any],
    *args: Any,
    pools: Mapping[str, torch.Tensor] | None = None,
    dynamic: bool = False,
    functionalization: str = "v2",
    dump_dir: str | os.PathLike[str] | None = None,
    inductor_config: Mapping[str, Any] | None = None,
    analysis_only: bool = False,
    **kwargs: Any,
) -> list[SurvivingClone]:
    """The surviving pool clones of one compiled call of ``fn`` (``analyze_pool_clones(...).clones``)."""
    return analyze_pool_clones(
        fn,
        *args,
        pools=pools,
        dynamic=dynamic,
        functionalization=functionalization,
        dump_dir=dump_dir,
        inductor_config=inductor_config,
        analysis_only=analysis_only,
        **kwargs,
    ).clones


def assert_no_pool_clones(
    fn: Callable[..., Any],
    *args: Any,
    pools: Mapping[str, torch.Tensor] | None = None,
    dynamic: bool = False,
    functionalization: str = "v2",
    dump_dir: str | os.PathLike[str] | None = None,
    inductor_config: Mapping[str, Any] | None = None,
    analysis_only: bool = False,
    allow_unanalysed: bool = False,
    **kwargs: Any,
) -> CloneReport:
    """Raise AssertionError naming op, argument, pool, bytes and dump file:line of each clone,
    and every other failure (a named pool never received, a region not analysed)."""
    report = analyze_pool_clones(
        fn,
        *args,
        pools=pools,
        dynamic=dynamic,
        functionalization=functionalization,
        dump_dir=dump_dir,
        inductor_config=inductor_config,
        analysis_only=analysis_only,
        allow_unanalysed=allow_unanalysed,
        **kwargs,
    )
    if not report.check_passed:
        raise AssertionError(format_report(report))
    return report


__all__ = [
    "CloneCheck",
    "CompileCheckError",
    "analyze_pool_clones",
    "assert_no_pool_clones",
    "callable_name",
    "dump",
    "find_pool_clones",
    "first_line",
    "format_report",
]
