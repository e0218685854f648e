"""Resolve the user's targets (``path/to/file.py:NAME`` or ``package.module:NAME``) to cases.

``NAME`` is a :class:`~compile_checks.case.Case`, a list/tuple of them, or a zero-argument
callable returning either (the callable form builds fresh tensors each time it is loaded); any
of those cases may be a :class:`~compile_checks.lazy_case.LazyCase`, which planning and ``list``
read without building (:func:`declared_cases`), or a :class:`~compile_checks.ranks.RankedCase`, run on
every rank. Every failure is a :class:`TargetError` that names the target and what was wrong.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compile_checks.case import Case
from compile_checks.errors import CompileChecksError
from compile_checks.lazy_case import LazyCase
from compile_checks.ranks.spec import RankedCase

Declared = Case | LazyCase | RankedCase


class TargetError(CompileChecksError, ValueError):
    """A target could not be resolved to cases (the CLI maps it to its usage exit code)."""


def _exited(e: SystemExit) -> str:
    """A target's code that exits would end the gate with its code (0: "passed") and no table."""
    return f"called sys.exit({e.code!r}) (SystemExit): a target must define cases, not exit"


def _split(spec: str) -> tuple[str, str]:
    # rpartition: a Windows drive ("C:\\x.py:NAME") or a path with ':' keeps its head
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name or not name.isidentifier():
        raise TargetError(f"target {spec!r}: expected 'path/to/file.py:NAME' or 'package.module:NAME'")
    return where, name


def _load_module(where: str, spec: str, base_dir: Path) -> Any:
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if not path.is_absolute():
            path = base_dir / path
        if not path.is_file():
            raise TargetError(f"target {spec!r}: no such file {path}")
        module_name = f"_compile_checks_target_{abs(hash(str(path.resolve())))}"
        if module_name in sys.modules:
            return sys.modules[module_name]
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise TargetError(f"target {spec!r}: cannot load {path}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        # the file's own folder first, so it can import its siblings as a user's script would
        sys.path.insert(0, str(path.parent))
        try:
            loader_spec.loader.exec_module(module)
        except SystemExit as e:
            sys.modules.pop(module_name, None)
            raise TargetError(f"target {spec!r}: importing {path} {_exited(e)}") from None
        except Exception as e:
            sys.modules.pop(module_name, None)
            raise TargetError(f"target {spec!r}: importing {path} failed: {type(e).__name__}: {e}") from e
        finally:
            sys.path.remove(str(path.parent))
        return module
    try:
        return importlib.import_module(where)
    except SystemExit as e:
        raise TargetError(f"target {spec!r}: importing module {where!r} {_exited(e)}") from None
    except ImportError as e:
        raise TargetError(f"target {spec!r}: cannot import module {where!r}: {e}") from e


def _as_cases(value: Any, spec: str) -> list[Declared]:
    if isinstance(value, (Case, LazyCase, RankedCase)):
        return [value]
    if isinstance(value, (list, tuple)):
        bad = [type(v).__name__ for v in value if not isinstance(v, (Case, LazyCase, RankedCase))]
        if bad:
            raise TargetError(f"target {spec!r}: the list holds non-Case items ({', '.join(sorted(set(bad)))})")
        if not value:
            raise TargetError(f"target {spec!r}: the list of cases is empty")
        return list(value)
    raise TargetError(
        f"target {spec!r}: expected a Case (or LazyCase), a list of them or a zero-argument callable returning either, "
        f"got {type(value).__name__}"
    )


def declared_cases(spec: str, base_dir: str | Path | None = None) -> list[Declared]:
    """The cases one target names, a ``LazyCase`` not yet built; relative file paths are taken from
    ``base_dir`` (default: cwd)."""
    where, name = _split(spec)
    module = _load_module(where, spec, Path(base_dir) if base_dir is not None else Path.cwd())
    try:
        value = getattr(module, name)
    except AttributeError:
        raise TargetError(f"target {spec!r}: {where} has no attribute {name!r}") from None
    if not isinstance(value, (Case, LazyCase, RankedCase, list, tuple)) and callable(value):
        try:
            value = value()
        except SystemExit as e:
            raise TargetError(f"target {spec!r}: calling {name}() {_exited(e)}") from None
        except Exception as e:
            raise TargetError(f"target {spec!r}: calling {name}() failed: {type(e).__name__}: {e}") from e
    return _as_cases(value, spec)


def load_target(spec: str, base_dir: str | Path | None = None) -> list[Case | RankedCase]:
    """The cases one target names, built (:func:`declared_cases`, each ``LazyCase`` materialized)."""
    return [c.materialize() if isinstance(c, LazyCase) else c for c in declared_cases(spec, base_dir)]


def load_targets(specs: Sequence[str], base_dir: str | Path | None = None) -> list[Case]:
    """All cases of all targets, in order (single-process cases: the traffic report's); names unique across them."""
    cases: list[Case] = []
    for spec in specs:
        for c in load_target(spec, base_dir):
            if isinstance(c, RankedCase):
                raise TargetError(f"target {spec!r}: {c.name!r} is a RankedCase; per-rank cases run in the gate only")
            cases.append(c)
    seen: set[str] = set()
    dupes = sorted({c.name for c in cases if c.name in seen or seen.add(c.name)})  # type: ignore[func-returns-value]
    if dupes:
        raise TargetError(f"duplicate case names across targets: {', '.join(dupes)}")
    return cases


__all__ = ["Declared", "TargetError", "declared_cases", "load_target", "load_targets"]
