"""Each new scenario's verdict against the code Inductor generated for it (full compile).

A pool copy in the generated code is an allocation of at least one pool's size in the
compiled module's ``call`` (``empty_strided_cpu``): Inductor only allocates a buffer that
big to clone a pool (a functionalization clone, or the buffer of a functional
``index_put`` that is copied back). A clean commit writes the pools in place: no such buffer.

One full compile per scenario, commit graph only (``denoise_steps=1``), once per test session
(``conftest.truths``: shared by the pytest-xdist workers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from _checks import COMMIT_GRAPH_ONLY, pool_sized_allocations
from torch._inductor.utils import run_and_get_code

from compile_checks.case import CaseResult, run_case
from compile_checks.scenarios import SCENARIOS, scenario_case

pytestmark = [pytest.mark.compile, pytest.mark.slow]

Truths = Callable[[str, Callable[[], Any]], Any]  # the conftest.truths fixture


# commit graph only (_checks.COMMIT_GRAPH_ONLY); the whole-model region of commit_before is 2 layers
# here (the gate runs 4) to keep the compile short
_SHRINK = COMMIT_GRAPH_ONLY
_SHRINK_WHOLE_MODEL = {**_SHRINK, "num_layers": 2, "layers_per_region": 2}

NEW_SCENARIOS: dict[str, dict[str, int]] = {
    "fused_kv_v1": _SHRINK,
    "attn_op_commit_after": _SHRINK,
    "attn_op_commit_last": _SHRINK,
    "commit_before": _SHRINK_WHOLE_MODEL,
    "commit_before_per_layer": _SHRINK,
    "index_put_commit": _SHRINK,
    "index_put_commit_last": _SHRINK,
}


def test_pool_sized_allocations_parser() -> None:
    code = (
        "buf3 = empty_strided_cpu((1024, 2, 32), (64, 32, 1), torch.float32)\n"
        "buf4 = empty_strided_cpu((131072, ), (1, ), torch.bfloat16)\n"
        "buf5 = empty_strided_cpu((16, 64), (64, 1), torch.float32)\n"
    )
    assert pool_sized_allocations(code, 1024 * 2 * 32 * 4) == [1024 * 2 * 32 * 4, 131072 * 2]


def generated_truth(name: str) -> dict[str, Any]:
    """One full compile of ``name``: the pool-sized buffers its generated code allocates, the check's
    clones, compiled == eager (plain data, so ``conftest.truths`` shares it across workers)."""
    s = dataclasses.replace(SCENARIOS[name], **NEW_SCENARIOS[name])
    result, codes = run_and_get_code(run_case, scenario_case(s))
    assert codes, f"{name}: Inductor generated no code"
    return {
        "code_copies": sorted(b for code in codes for b in pool_sized_allocations(code, s.pool_bytes)),
        "check_copies": check_copies(result),
        "eager_match": result.eager_match,
        "notes": list(result.notes),
    }


def check_copies(result: CaseResult) -> list[int]:
    """Bytes of each distinct clone node the check reports (a graph shared by layers counts once)."""
    return sorted({(c.region, c.node): c.nbytes for c in result.report.clones}.values())


@pytest.mark.parametrize("name", list(NEW_SCENARIOS))
def test_generated_code_shows_the_expected_verdict(name: str, truths: Truths) -> None:
    """Negative controls copy K and V (>= 2 pool-sized buffers); clean shapes allocate none."""
    truth = truths(f"generated_code/{name}", lambda: generated_truth(name))
    copies = truth["code_copies"]
    if SCENARIOS[name].expect_clean:
        assert copies == [], f"{name}: pool-sized buffers {copies} in a scenario expected clean"
    else:
        assert len(copies) >= 2, f"{name}: expected pool copies of K and V, generated code has {copies}"
    assert truth["eager_match"], truth["notes"]


@pytest.mark.parametrize("name", list(NEW_SCENARIOS))
def test_check_verdict_equals_the_generated_code(name: str, truths: Truths) -> None:
    """The check reports exactly the pool copies the generated code allocates (count and bytes)."""
    truth = truths(f"generated_code/{name}", lambda: generated_truth(name))
    assert truth["check_copies"] == truth["code_copies"]
