"""Shared test configuration: Inductor caches off for every test, hypothesis profile, the ar_paging debug-checks fixture."""

from __future__ import annotations

import os

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
