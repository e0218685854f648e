"""Shared test configuration: Inductor caches off for every test, hypothesis profile, the ar_paging debug-checks fixture."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

# vLLM resolves its platform at first import: a CUDA vLLM wheel on this CPU-only host needs
# VLLM_TARGET_DEVICE=cpu before anything (ar_paging, the vllm pipelines) imports vLLM
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import pytest
import torch
from hypothesis import settings

settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _inductor_caches_off():
    """Inductor's FX graph cache can hand back code compiled for another layout."""
    import torch._inductor.config as inductor_config

    from compile_checks.pipelines import probe_cpu_isa

    probe_cpu_isa()  # before caches go off: else every worker's first C++ build re-runs the probe (~8 s)
    old = inductor_config.force_disable_caches
    inductor_config.force_disable_caches = True
    torch.manual_seed(0)
    yield
    inductor_config.force_disable_caches = old


@pytest.fixture
def debug_checks():
    """ar_paging's debug checks (range/duplicate slot checks, syncs) on for one test, restored after."""
    import ar_paging

    before = ar_paging.debug_checks_enabled()
    ar_paging.set_debug_checks(True)
    yield
    ar_paging.set_debug_checks(before)


@pytest.fixture(scope="session")
def truths(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[], Any]], Any]:
    """``truths(key, compute)``: a ground truth computed once per session across xdist workers (_checks.shared_truth)."""
    from _checks import shared_truth

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "truths"  # the workers' common parent
    root.mkdir(exist_ok=True)
    return lambda key, compute: shared_truth(root, key, compute)
