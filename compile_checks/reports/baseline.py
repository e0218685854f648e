"""A committed baseline of clone counts and extra bytes, and the check that nothing grew.

The JSON maps scenario name -> ``{"surviving_clones": int, "extra_bytes_per_step": float}``
(extra = clone + copy-back, see :mod:`compile_checks.reports.accounting`). Every entry is
validated on load: a NaN, an infinity, a negative or non-numeric value or a missing key
is an error (a NaN compares false with everything, so it would pass any run).
Only growth fails: fewer clones or fewer bytes is progress, and a scenario that is
not in the baseline is reported as new, not failed (it has nothing to regress from).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from compile_checks.errors import CompileChecksError

# Bytes per step are averages (a division), so allow float noise, never a real byte.
_REL_TOL = 1e-9


@dataclass(frozen=True)
class BaselineEntry:
    surviving_clones: int
    extra_bytes_per_step: float


@dataclass(frozen=True)
class Regression:
    """One scenario whose clones or clone bytes grew against the baseline."""

    scenario: str
    old: BaselineEntry
    new: BaselineEntry

    def describe(self) -> str:
        parts = []
        if self.new.surviving_clones > self.old.surviving_clones:
            parts.append(f"surviving_clones {self.old.surviving_clones} -> {self.new.surviving_clones}")
        if _grew(self.old.extra_bytes_per_step, self.new.extra_bytes_per_step):
            parts.append(
                f"extra_bytes_per_step {self.old.extra_bytes_per_step:.0f} -> {self.new.extra_bytes_per_step:.0f}"
            )
        return f"{self.scenario}: " + ", ".join(parts)


@dataclass(frozen=True)
class Comparison:
    regressions: list[Regression]
    new_scenarios: list[str]  # run but not in the baseline
    improved: list[str]  # fewer clones or fewer bytes than the baseline

    @property
    def ok(self) -> bool:
        return not self.regressions


def _grew(old: float, new: float) -> bool:
    return new > old and not math.isclose(new, old, rel_tol=_REL_TOL, abs_tol=0.0)


def compare(baseline: Mapping[str, BaselineEntry], current: Mapping[str, BaselineEntry]) -> Comparison:
    """Scenarios of ``current`` whose clone count or clone bytes per step exceed the baseline's."""
    regressions: list[Regression] = []
    new: list[str] = []
    improved: list[str] = []
    for name, now in current.items():
        old = baseline.get(name)
        if old is None:
            new.append(name)
        elif now.surviving_clones > old.surviving_clones or _grew(old.extra_bytes_per_step, now.extra_bytes_per_step):
            regressions.append(Regression(name, old, now))
        elif now.surviving_clones < old.surviving_clones or now.extra_bytes_per_step < old.extra_bytes_per_step:
            improved.append(name)
    return Comparison(regressions, new, improved)


class BaselineError(CompileChecksError, ValueError):
    """The baseline file is missing or not the expected JSON."""


def load_baseline(path: str | Path) -> dict[str, BaselineEntry]:
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as e:
        raise BaselineError(f"cannot read baseline {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise BaselineError(f"baseline {path} is not valid JSON: {e}") from e
    if not isinstance(raw, dict):
        raise BaselineError(f"baseline {path} must be a JSON object scenario -> entry")
    return {name: _entry(path, name, entry) for name, entry in raw.items()}


_KEYS = ("surviving_clones", "extra_bytes_per_step")


def _number(path: str | Path, name: str, key: str, value: object) -> float:
    """A finite, non-negative JSON number (bool and strings refused: "3" is a typo, not a count)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BaselineError(f"baseline {path}: {name}.{key} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise BaselineError(f"baseline {path}: {name}.{key} must be a finite number >= 0, got {value!r}")
    return float(value)


def _entry(path: str | Path, name: str, entry: object) -> BaselineEntry:
    if not isinstance(entry, dict):
        raise BaselineError(f"baseline {path}: entry {name!r} must be an object with {', '.join(_KEYS)}, got {entry!r}")
    missing = [k for k in _KEYS if k not in entry]
    if missing:
        raise BaselineError(
            f"baseline {path}: entry {name!r} lacks {', '.join(missing)} (has {', '.join(entry) or 'nothing'})"
        )
    clones = _number(path, name, "surviving_clones", entry["surviving_clones"])
    if clones != int(clones):
        raise BaselineError(f"baseline {path}: {name}.surviving_clones must be a whole number, got {clones!r}")
    return BaselineEntry(int(clones), _number(path, name, "extra_bytes_per_step", entry["extra_bytes_per_step"]))


def dump_baseline(entries: Mapping[str, BaselineEntry]) -> str:
    data = {
        name: {"surviving_clones": e.surviving_clones, "extra_bytes_per_step": e.extra_bytes_per_step}
        for name, e in sorted(entries.items())
    }
    return json.dumps(data, indent=2) + "\n"
