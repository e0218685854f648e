"""The environment vLLM compiles in for the vllm pipelines, set and restored around each use.

vLLM reads its platform and its compile-cache switches from ``os.environ``: inside
:func:`vllm_env` the platform is CPU (``VLLM_TARGET_DEVICE=cpu``) and vLLM's compile cache and
AOT compile are off; everything (including what ``CpuPlatform.check_and_update_config``
writes into ``os.environ``) is restored on exit. Nothing here runs at import, and torch is imported
only when asked whether CUDA is there: the gate's CLI spawns its workers before it imports torch.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from compile_checks.errors import CompileChecksError

# what vLLM reads from the environment while compiling: CPU platform, and no compile cache
# (vLLM's AOT artifacts and its torch_compile_cache would hand back code compiled without the
# check's hooks). VLLM_DISABLE_COMPILE_CACHE alone does not stop an explicit VLLM_USE_AOT_COMPILE=1.
_COMPILE_ENV: dict[str, str] = {
    "VLLM_DISABLE_COMPILE_CACHE": "1",
    "VLLM_USE_AOT_COMPILE": "0",
    "VLLM_USE_MEGA_AOT_ARTIFACT": "0",
}


def _cuda_available() -> bool:
    import torch  # lazy: see the module docstring

    return torch.cuda.is_available()


class VllmPipelineError(CompileChecksError, RuntimeError):
    """The vllm pipeline cannot run here (no vLLM, a CUDA host, vLLM's env cache frozen)."""


@contextlib.contextmanager
def vllm_env() -> Iterator[None]:
    """vLLM's CPU platform and no vLLM compile cache; ``os.environ`` restored exactly on exit.

    Raises VllmPipelineError on a CUDA host: there vLLM would pick its CUDA platform and
    compile with ``VllmBackend`` (piecewise graphs, CUDA graphs), which this pipeline does
    not reproduce ("vllm-piecewise" simulates that path on CPU).
    """
    if _cuda_available():
        raise VllmPipelineError(
            "pipeline 'vllm' reproduces vLLM's CPU-platform compile path; on this CUDA host vLLM would compile "
            "through VllmBackend (piecewise), which this pipeline does not run. Use 'vllm-piecewise' (a CPU "
            "simulation of that path) or gate on a CPU host"
        )
    saved = dict(os.environ)
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ.update(_COMPILE_ENV)
    try:
        _require_live_envs()
        _require_cpu_platform()
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def prepare_process_for_vllm() -> bool:
    """For process entry points (a CLI ``main``, a ``conftest.py``), not library import: set
    ``VLLM_TARGET_DEVICE=cpu`` (if unset) before anything imports vLLM, on a host without CUDA.

    Returns True when it set the variable. Leaves everything alone once vLLM is imported
    (its platform is already resolved) or when CUDA is available.
    """
    if "vllm" in sys.modules or "VLLM_TARGET_DEVICE" in os.environ or _cuda_available():
        return False
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    return True


# set by ``import vllm`` (vllm/env_override.py) so that torch.cuda.is_available() asks NVML, not the CUDA runtime
_NVML_CUDA_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def undo_nvml_cuda_check() -> bool:
    """For a process the gate owns, once vLLM is imported: on a host without CUDA, take back vLLM's
    ``PYTORCH_NVML_BASED_CUDA_CHECK=1``.

    vLLM sets it so that ``torch.cuda.is_available()`` does not initialize CUDA before it forks its
    workers. With a CUDA build of torch on a host without NVML, every such call then tries to ``dlopen``
    libnvidia-ml, fails, and falls back to the CUDA runtime's device count: ~70-120 us a call against
    ~1 us, and Inductor's fake tensors ask on every op (17,623 calls, 2.15 s of a 45 s built-in gate in
    one process). Where the answer is "no CUDA" there is no CUDA state for a fork to inherit, and the
    answer is the same either way. Returns True when it removed the variable; leaves it on a CUDA host,
    before vLLM's import, and when it is not "1".
    """
    if os.environ.get(_NVML_CUDA_CHECK) != "1" or "vllm" not in sys.modules or _cuda_available():
        return False
    del os.environ[_NVML_CUDA_CHECK]
    return True


def _require_cpu_platform() -> None:
    """vLLM resolves its platform once, at the first import that asks for it, and many of its
    modules keep that object: a platform resolved before VLLM_TARGET_DEVICE=cpu was set
    (``UnspecifiedPlatform`` with a CUDA vLLM wheel on a CPU host) cannot be replaced here."""
    platforms = importlib.import_module("vllm.platforms")
    platform = platforms.current_platform
    if not platform.is_cpu():
        raise VllmPipelineError(
            f"vLLM's platform was resolved as {type(platform).__name__} before the vllm pipeline ran (vLLM was "
            "imported without VLLM_TARGET_DEVICE=cpu on this CPU-only host). Set VLLM_TARGET_DEVICE=cpu in the "
            "environment before anything imports vLLM (e.g. `VLLM_TARGET_DEVICE=cpu compile-checks gate ...`)"
        )


def _require_live_envs() -> None:
    """vLLM can freeze its env reads (``envs.enable_envs_cache()``, done by a serving engine)."""
    envs = importlib.import_module("vllm.envs")
    if envs._is_envs_cache_enabled():
        stale = {k: getattr(envs, k) for k in ("VLLM_DISABLE_COMPILE_CACHE", "VLLM_USE_AOT_COMPILE")}
        if stale != {"VLLM_DISABLE_COMPILE_CACHE": True, "VLLM_USE_AOT_COMPILE": False}:
            raise VllmPipelineError(
                f"vllm.envs caches its environment (enable_envs_cache() was called) with {stale}: "
                "the vllm pipeline needs vLLM's compile cache and AOT compile off; call "
                "vllm.envs.disable_envs_cache() first"
            )


def vllm_module(name: str) -> Any:
    """Import a vLLM module under :func:`vllm_env`: vLLM resolves its platform at first import."""
    with vllm_env():
        return importlib.import_module(name)


__all__ = ["VllmPipelineError", "prepare_process_for_vllm", "undo_nvml_cuda_check", "vllm_env", "vllm_module"]
