"""Shared test configuration: Inductor caches off for every test, hypothesis profile."""

from __future__ import annotations

import os

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
