"""Which test modules pytest-xdist must keep on one worker, read from their source (``ast``).

A module-scoped fixture (or a session-scoped one defined in the module, or a module-level
``functools.cache``) is built once per *worker*: split across both workers, the expensive setup runs
twice (seen: ``test_view_scatter_choice.py``'s traced full compile, 12 s, built on both). Reading
the scopes from the source keeps a new module of that kind grouped without a hand-kept list.
"""

from __future__ import annotations

import ast
from pathlib import Path

SHARED_SCOPES = frozenset({"module", "package", "session"})
CACHE_DECORATORS = frozenset({"cache", "lru_cache"})

# modules on one worker although none has a wide fixture of its own: those sharing one module-level
# cache of another module (tests/_checks.scenario_analysis: each scenario's analysis run computed once
# for all of them), and those sharing a per-process server
CROSS_MODULE_GROUPS: dict[str, str] = {
    "test_compile_checks_e2e.py": "scenario_analysis",
    "test_scenarios_cases.py": "scenario_analysis",
    # modules that launch forked ranks: one worker starts the ranks' fork server (it imports torch,
    # this package and vLLM: ~6 s of CPU), not both
    "test_ranks_example.py": "forked_ranks",
    "test_ranks_launch.py": "forked_ranks",
    "test_ranks_collectives.py": "forked_ranks",
    "test_ranks_forked.py": "forked_ranks",
}


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _shared_scope(node: ast.expr) -> bool:
    """``@pytest.fixture(scope=...)`` with a scope wider than a test, or ``@functools.cache`` / ``lru_cache``."""
    name = _decorator_name(node)
    if name in CACHE_DECORATORS:
        return True
    if name != "fixture" or not isinstance(node, ast.Call):
        return False
    return any(
        k.arg == "scope" and isinstance(k.value, ast.Constant) and k.value.value in SHARED_SCOPES for k in node.keywords
    )


def has_shared_setup(source: str) -> bool:
    """Whether a module's top-level functions include a fixture or cache that outlives one test."""
    tree = ast.parse(source)
    return any(
        _shared_scope(d)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for d in node.decorator_list
    )


def shared_setup_groups(tests_dir: Path) -> dict[str, str]:
    """``{file name: group}`` of every test module whose tests must run on one worker."""
    groups = {p.name: p.stem for p in sorted(tests_dir.glob("test_*.py")) if has_shared_setup(p.read_text())}
    return {**groups, **CROSS_MODULE_GROUPS}


__all__ = ["CROSS_MODULE_GROUPS", "has_shared_setup", "shared_setup_groups"]
