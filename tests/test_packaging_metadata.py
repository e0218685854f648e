"""pyproject.toml admits the environments a vLLM 0.33 engine has, and ships only our packages.

Read with tomllib + packaging (no build, no network): the same specifiers pip evaluates. The
negative control is main's old metadata (exact torch/vllm pins, Python 3.11 only, a top-level
``reports`` package), which fails every one of these checks.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent

# main @ 80db561, the metadata issue 7 reported as ResolutionImpossible beside vLLM 0.33.0
OLD_PYPROJECT = """
[project]
name = "ar-compile-checks"
version = "0.1.0"
requires-python = ">=3.11,<3.12"
dependencies = ["torch==2.13.0", "vllm==0.33.0", "depyf==0.20.0", "pandas", "matplotlib", "tabulate", "rich", "tqdm"]
[project.optional-dependencies]
test = ["pytest", "hypothesis"]
[project.entry-points.pytest11]
compile_checks = "compile_checks.pytest_plugin"
[tool.setuptools.packages.find]
include = ["ar_paging*", "compile_checks*", "reports*"]
"""

# What vLLM 0.33.0's wheel metadata pins (Requires-Dist / Requires-Python), and the torch versions this
# repo's CI runs: the lock's 2.14.0 (reported as 2.14.0+cu130), the lower-bound lock's 2.13.0+cpu, and
# 2.14.1, the newest reachable (run by scripts/test_torch_floor.sh; docs/development.md: "torch versions").
VLLM_TORCH = "2.14.0"
ENGINE_TORCH = (VLLM_TORCH, "2.14.0+cu130", "2.14.1", "2.13.0", "2.13.0+cpu")
FLOOR_TORCH = "2.13.0+cpu"
ENGINE_VLLM = "0.33.0"
ENGINE_DEPYF = "0.20.0"
ENGINE_PYTHONS = ("3.11.0", "3.12.0", "3.13.0", "3.14.0")


def _requirements(items: list[str]) -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in items]
    return {r.name.lower(): r for r in reqs}


def metadata_problems(project_toml: dict[str, Any]) -> list[str]:
    """Every way this metadata would keep the package out of a vLLM 0.33 engine environment."""
    problems: list[str] = []
    project = project_toml["project"]
    python = SpecifierSet(project.get("requires-python", ""))
    problems += [f"requires-python {python} rejects Python {v}" for v in ENGINE_PYTHONS if v not in python]
    base = _requirements(project.get("dependencies", []))
    extras = {name: _requirements(items) for name, items in project.get("optional-dependencies", {}).items()}
    torch = base.get("torch")
    if torch is None:
        problems.append("torch is not a dependency")
    else:
        problems += [
            f"torch {torch.specifier} rejects {v}"
            for v in ENGINE_TORCH
            if not torch.specifier.contains(v, prereleases=True)
        ]
    depyf = base.get("depyf")
    if depyf is None or not depyf.specifier.contains(ENGINE_DEPYF):
        problems.append(f"depyf must be a dependency admitting {ENGINE_DEPYF} (vLLM pins it)")
    if "vllm" in base:
        problems.append("vllm is a base dependency (the checker needs only torch and depyf; vLLM belongs in an extra)")
    vllm = extras.get("vllm", {}).get("vllm")
    if vllm is None or not vllm.specifier.contains(ENGINE_VLLM):
        problems.append(f"the [vllm] extra must require a vllm admitting {ENGINE_VLLM}")
    for name in ("reports", "test", "all"):
        if name not in extras:
            problems.append(f"no [{name}] extra")
    includes = project_toml.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("include", [])
    if any(fnmatch.fnmatchcase("reports", pattern) for pattern in includes):
        problems.append(f"packages.find include {includes} ships a top-level 'reports' package")
    scripts = project.get("scripts", {})
    if scripts.get("compile-checks") != "compile_checks.cli:main":
        problems.append("no console script compile-checks = compile_checks.cli:main")
    if project.get("entry-points", {}).get("pytest11", {}).get("compile_checks") != "compile_checks.gate.plugin":
        problems.append("no pytest11 entry point for compile_checks.gate.plugin")
    return problems


def _lock_pins(name: str = "lock.txt") -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_pyproject_admits_vllm_033_engine_environments() -> None:
    project_toml = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert metadata_problems(project_toml) == []
    # the upper bounds are real: an unverified torch or Python is not admitted
    python = SpecifierSet(project_toml["project"]["requires-python"])
    assert "3.10.0" not in python and "3.15.0" not in python
    torch = _requirements(project_toml["project"]["dependencies"])["torch"]
    assert not torch.specifier.contains("2.15.0") and not torch.specifier.contains("2.12.0")


def test_old_pins_fail_the_same_checks() -> None:
    """Negative control: main's exact pins would not install beside vLLM 0.33.0."""
    problems = metadata_problems(tomllib.loads(OLD_PYPROJECT))
    joined = "\n".join(problems)
    assert "torch ==2.13.0 rejects 2.14.0" in joined
    assert "rejects Python 3.12.0" in joined and "rejects Python 3.14.0" in joined
    assert "vllm is a base dependency" in joined
    assert "ships a top-level 'reports' package" in joined
    assert "no console script" in joined


def lock_problems(project: dict[str, Any], pins: dict[str, str]) -> list[str]:
    """Declared requirements (base + extras) the lock leaves unpinned or pins outside their range."""
    declared = list(project["dependencies"])
    for items in project["optional-dependencies"].values():
        declared += [r for r in items if not r.startswith("ar-compile-checks")]  # [all] names our own extras
    problems = []
    for requirement in map(Requirement, declared):
        name = requirement.name.lower().replace("_", "-")
        if name not in pins:
            problems.append(f"{name} is declared but not pinned in the lock")
        elif not requirement.specifier.contains(pins[name], prereleases=True):
            problems.append(f"the lock pins {name}=={pins[name]}, outside {requirement.specifier}")
    return problems


def test_lock_satisfies_the_declared_ranges() -> None:
    """requirements/lock.txt (the CI's exact set) is one of the environments the metadata admits."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert lock_problems(project, _lock_pins()) == []


def test_lock_check_catches_a_pin_outside_the_range_and_a_missing_pin() -> None:
    """Negative control for the lock check."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {**_lock_pins(), "torch": "2.15.0"}
    del pins["depyf"]
    problems = lock_problems(project, pins)
    assert any(p.startswith("the lock pins torch==2.15.0") for p in problems), problems
    assert "depyf is declared but not pinned in the lock" in problems


# --- the two locks CI installs: torch 2.14.0 (what vLLM 0.33 pins) and the declared lower bound ---


def _is_cuda_runtime(name: str) -> bool:
    """The CUDA runtime wheels the 2.14.0 torch wheel links (not needed by a CPU build of torch)."""
    return name.startswith("nvidia-") or name == "cuda-toolkit"


def floor_lock_problems(lock: dict[str, str], floor: dict[str, str]) -> list[str]:
    """Ways the lower-bound lock is not 'the lock with torch at the floor and no CUDA runtime'."""
    want = {name: version for name, version in lock.items() if not _is_cuda_runtime(name)}
    want["torch"] = FLOOR_TORCH
    problems = [
        f"{name}: the lock pins {want.get(name)}, the floor lock {floor.get(name)}"
        for name in sorted(want.keys() | floor.keys())
        if want.get(name) != floor.get(name)
    ]
    return problems


def test_the_lock_runs_the_torch_vllm_pins() -> None:
    assert _lock_pins()["torch"] == VLLM_TORCH
    assert _lock_pins()["vllm"] == ENGINE_VLLM


def test_the_floor_lock_is_the_lock_with_torch_at_the_lower_bound() -> None:
    """requirements/lock-torch2.13.txt differs from the lock in torch (and the CUDA runtime) only,
    and its torch is the lowest version pyproject admits."""
    floor = _lock_pins("lock-torch2.13.txt")
    assert floor_lock_problems(_lock_pins(), floor) == []
    torch = _requirements(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])["torch"]
    lower = [spec.version for spec in torch.specifier if spec.operator == ">="]
    assert lower and Version(Version(floor["torch"]).base_version) == Version(lower[0]) == Version("2.13")
    assert lock_problems(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"], floor) == []


def test_floor_lock_check_catches_drift() -> None:
    """Negative control: a floor lock that moved another pin, or kept 2.14.0, fails."""
    lock = _lock_pins()
    floor = _lock_pins("lock-torch2.13.txt")
    assert floor_lock_problems(lock, {**floor, "numpy": "1.26.4"}) == [
        f"numpy: the lock pins {lock['numpy']}, the floor lock 1.26.4"
    ]
    assert floor_lock_problems(lock, {**floor, "torch": VLLM_TORCH}) != []


def test_the_lock_pins_the_cuda_runtime_the_installed_torch_declares() -> None:
    """In the 2.14.0 venv: every nvidia-* / cuda-toolkit requirement of torch's wheel is pinned in the
    lock at a version it accepts (the wheel links them; it does not import without them)."""
    from importlib.metadata import requires, version

    if Version(version("torch")).base_version != VLLM_TORCH:
        pytest.skip(f"torch {version('torch')} is not the lock's {VLLM_TORCH} (a venv from another lock)")
    lock = _lock_pins()
    runtime = [Requirement(r) for r in requires("torch") or []]
    runtime = [
        r
        for r in runtime
        if _is_cuda_runtime(r.name.lower()) and (r.marker is None or r.marker.evaluate({"extra": ""}))
    ]
    assert runtime, "torch 2.14.0 declares no CUDA runtime: the lock's block is not needed"
    # cuda-toolkit[cublas,cudart,...] is a metapackage: its extras name the nvidia-* wheels
    for toolkit in [r for r in runtime if r.name.lower() == "cuda-toolkit"]:
        extras = [Requirement(r) for r in requires("cuda-toolkit") or []]
        runtime += [
            r for r in extras if r.marker is not None and any(r.marker.evaluate({"extra": e}) for e in toolkit.extras)
        ]
    assert any(r.name == "nvidia-cuda-runtime" for r in runtime), [str(r) for r in runtime]
    missing = [str(r) for r in runtime if not r.specifier.contains(lock.get(r.name.lower(), "0"), prereleases=True)]
    assert missing == []
    # and nothing more: every CUDA runtime wheel the lock pins is one torch asks for
    undeclared = sorted(
        name for name in lock if _is_cuda_runtime(name) and name not in {r.name.lower() for r in runtime}
    )
    assert undeclared == []
