"""Build and load the C++ CPU kernel of ``ar_paging::paged_write`` (``csrc/paged_write.cpp``).

Why: the Python kernel pays the dispatcher-to-Python trampoline (~2.3 us) and its
metadata checks in Python (~4-5 us) on every call; the C++ kernel does the same
checks, with the same messages, in well under a microsecond
(``python -m reports.bench_hotpath``).

How: a JIT build on first use, with the compiler torch names
(``torch.utils.cpp_extension.get_cxx_compiler``: ``$CXX`` or ``c++``) and torch's
own include and library paths; no ninja, no Python bindings (the library only
registers kernels, loaded with ``torch.ops.load_library``). The shared object is
cached under ``$AR_PAGING_NATIVE_CACHE`` or ``~/.cache/ar_paging`` (``$XDG_CACHE_HOME``
honoured), keyed by the source, the torch build and the flags, so a torch upgrade
rebuilds. The build is logged on stderr; concurrent processes (pytest-xdist) wait
on a file lock instead of building twice.

``AR_PAGING_NATIVE`` picks the kernel at import:

* unset / ``auto``: the C++ kernel when it builds and loads, else a ``RuntimeWarning``
  saying why and the pure-Python kernel (same checks, same results, slower);
* ``0`` / ``off``: the pure-Python kernel, nothing is built;
* ``1`` / ``require``: the C++ kernel or an ``ImportError`` (CI uses it to make sure).

The C++ kernel is registered for the CPU dispatch key only; CUDA and every other
device keep the Python kernel (CUDA-graph capturable, as before).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ENV_VAR = "AR_PAGING_NATIVE"
CACHE_ENV_VAR = "AR_PAGING_NATIVE_CACHE"
SOURCE = Path(__file__).with_name("csrc") / "paged_write.cpp"
CXX_FLAGS = ("-O2", "-std=c++20", "-shared", "-fPIC", "-fvisibility=hidden")

_OFF = ("0", "off", "false", "no", "python")
_REQUIRED = ("1", "on", "true", "yes", "require", "native")


class NativeBuildError(RuntimeError):
    """The C++ kernel could not be built or loaded; the message says why and what to do."""


def mode() -> str:
    """``"off"``, ``"auto"`` or ``"require"``, from ``AR_PAGING_NATIVE``."""
    value = os.environ.get(ENV_VAR, "auto").strip().lower()
    if value in _OFF:
        return "off"
    if value in _REQUIRED:
        return "require"
    if value in ("", "auto"):
        return "auto"
    raise ValueError(f"{ENV_VAR}={value!r}: expected 0 (Python kernel), 1 (require the C++ kernel) or auto")


def cache_dir() -> Path:
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ar_paging"


def _compile_command(cxx: str, source: Path, output: Path) -> list[str]:
    from torch.utils import cpp_extension

    abi = int(torch.compiled_with_cxx11_abi())
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    lib_dirs = cpp_extension.library_paths()
    links = [f"-L{p}" for p in lib_dirs] + [f"-Wl,-rpath,{p}" for p in lib_dirs]
    return [
        cxx,
        *CXX_FLAGS,
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *includes,
        str(source),
        "-o",
        str(output),
        *links,
        "-lc10",
        "-ltorch_cpu",
    ]


def library_path() -> Path:
    """Where the shared object for this source, this torch build and these flags lives (built or not)."""
    try:
        source = SOURCE.read_bytes()
    except OSError as err:  # an install that did not ship csrc/ (package data)
        raise NativeBuildError(f"the kernel source {SOURCE} is missing from this install ({err})") from err
    key = hashlib.sha256()
    key.update(source)
    for part in (torch.__version__, torch.version.git_version, sys.platform, *CXX_FLAGS):
        key.update(str(part).encode() + b"\0")
    key.update(str(int(torch.compiled_with_cxx11_abi())).encode())
    return cache_dir() / f"paged_write-{key.hexdigest()[:20]}.so"


def _find_compiler() -> str:
    from torch.utils import cpp_extension

    cxx = cpp_extension.get_cxx_compiler()
    found = shutil.which(cxx)
    if found is None:
        raise NativeBuildError(f"no C++ compiler: {cxx!r} is not on PATH (install g++, or set CXX to a C++20 compiler)")
    return found


def build(output: Path) -> None:
    """Compile ``csrc/paged_write.cpp`` into ``output`` (atomically: a temporary file, then a rename)."""
    cxx = _find_compiler()
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(suffix=".so", dir=output.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    cmd = _compile_command(cxx, SOURCE, tmp)
    print(f"[ar_paging] building the native paged_write kernel (first use) into {output} ...", file=sys.stderr)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            command = " ".join(cmd)
            raise NativeBuildError(f"{Path(cxx).name} failed (exit {proc.returncode}):\n{tail}\ncommand: {command}")
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"[ar_paging] built in {time.perf_counter() - start:.1f} s", file=sys.stderr)


def _build_if_missing(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_file = open(path.with_suffix(".lock"), "w")  # noqa: SIM115 - held for the whole build
    except OSError as err:
        raise NativeBuildError(f"cannot write the kernel cache {path.parent} ({err}); set {CACHE_ENV_VAR}") from err
    with lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # another process may be building it right now
        if not path.exists():
            build(path)


_loaded: dict[str, Path] = {}  # "path": the library this process loaded (a TORCH_LIBRARY loads once)


def load() -> Path:
    """Build (once per machine and torch build) and load the kernel library; its path. Idempotent."""
    if "path" in _loaded:
        return _loaded["path"]
    path = library_path()
    if not path.exists():
        _build_if_missing(path)
    try:
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError) as err:
        raise NativeBuildError(f"built but could not be loaded: {err} (delete {path} to rebuild)") from err
    _loaded["path"] = path
    return path


def loaded() -> Path | None:
    """The loaded library, or ``None`` when the Python kernel is the CPU kernel."""
    return _loaded.get("path")


def load_per_environment() -> tuple[bool, str]:
    """Load as ``AR_PAGING_NATIVE`` says: ``(native loaded, why not when it is not)``.

    ``auto`` turns a failed build into a ``RuntimeWarning`` and the Python kernel;
    ``require`` into an ``ImportError``.
    """
    chosen = mode()
    if chosen == "off":
        return False, f"{ENV_VAR}=0"
    try:
        load()
    except NativeBuildError as err:
        if chosen == "require":
            raise ImportError(f"ar_paging: the native paged_write kernel is required ({ENV_VAR}=1): {err}") from err
        warnings.warn(
            f"ar_paging: the native paged_write kernel is unavailable, using the pure-Python kernel "
            f"(same checks and results, ~7 us more per call): {err}. Set {ENV_VAR}=0 to choose it silently.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False, str(err)
    return True, ""
