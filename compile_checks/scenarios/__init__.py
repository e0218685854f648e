"""Built-in scenarios: a small causal video-DiT denoising loop on ar_paging, checked for pool clones.

Each scenario (:mod:`.spec`) is one engine shape: pool layout (:mod:`.layouts`), attention and
commit placement (:mod:`.model`), the host loop with vLLM block tables and chunk-window
eviction (:mod:`.host_loop`). :func:`scenario_case` turns it into a ``Case`` that
``compile_checks.case.run_case`` checks (the same path a user's case takes); the same loop
runs eagerly on fresh pools and the compiled pools must match. :func:`builtin_cases` is the
built-in gate's cases. :mod:`.registry` holds the scenarios, the default gate (clean shapes +
negative controls) and the full-compile smoke set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compile_checks.scenarios.registry import (
    DEFAULT_GATE,
    DEFAULT_GATE_CLEAN,
    DEFAULT_GATE_NEGATIVE,
    FULL_COMPILE_SMOKE,
    SCENARIOS,
    scenario,
)
from compile_checks.scenarios.spec import ATTENTIONS, COMMIT_OPS, COMMIT_ORDERS, LAYOUTS, Scenario

if TYPE_CHECKING:
    from compile_checks.scenarios.cases import builtin_cases, scenario_case


def __getattr__(name: str) -> Any:
    """``scenario_case`` / ``builtin_cases`` on first use: building a case imports ar_paging's host loop and vLLM
    (~6 s); naming the scenarios (``compile-checks list``) needs neither."""
    if name in ("builtin_cases", "scenario_case"):
        from compile_checks.scenarios import cases

        return getattr(cases, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ATTENTIONS",
    "COMMIT_OPS",
    "COMMIT_ORDERS",
    "DEFAULT_GATE",
    "DEFAULT_GATE_CLEAN",
    "DEFAULT_GATE_NEGATIVE",
    "FULL_COMPILE_SMOKE",
    "LAYOUTS",
    "SCENARIOS",
    "Scenario",
    "builtin_cases",
    "scenario",
    "scenario_case",
]
