"""The pytest fixture, as a user's test suite uses it (pytester, inline run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ar_paging  # noqa: F401  # before pytester snapshots sys.modules: vLLM registers its opaque types once per process

pytest_plugins = ["pytester"]

USER_TESTS = """
import torch
import ar_paging  # noqa: F401

def step(k, v, x, slots):
    torch.ops.ar_paging.paged_write(k, v, x, x, slots)
    return k.sum()

def test_split_is_clean(pool_clone_check):
    k, v = torch.zeros(64, 2, 8), torch.zeros(64, 2, 8)
    report = pool_clone_check.assert_no_pool_clones(step, k, v, torch.ones(4, 2, 8), torch.arange(4), pools={"layer0.k": k, "layer0.v": v})
    assert report.clean and float(k[:4].sum()) == 64.0

def test_fused_fails(pool_clone_check):
    kv = torch.zeros(2, 64, 2, 8)
    pool_clone_check.assert_no_pool_clones(step, kv[0], kv[1], torch.ones(4, 2, 8), torch.arange(4), pools={"layer0.k": kv[0], "layer0.v": kv[1]})
"""


@pytest.mark.compile
def test_fixture_passes_clean_and_fails_fused_with_dump_path(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")  # in-process: Inductor is already warm
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "ar_paging::paged_write argument 'v_pool' (pool layer0.v)" in out
    assert f"clone of {2 * 64 * 2 * 8 * 4} bytes" in out
    assert "dumps kept at" in out and "POST_GRAD.0.py:" in out  # the check's own dump of a failing check
    kept = Path(re.search(r"dumps kept at (/\S+)", out).group(1))  # type: ignore[union-attr]
    index = (kept / "index.md").read_text()
    assert "CLONED" in index and "v_pool" in index
    # the passing check was not dumped (no --keep-compile-dumps), the failing one was
    assert not list(kept.parent.parent.parent.glob("test_split_is_clean*/compile_checks/check0"))
