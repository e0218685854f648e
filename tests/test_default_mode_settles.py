"""The default mode's verdict is the generated code's: a copy whose buffer is Inductor's choice is settled.

The AR window pattern (read the cache window, slice-write the new chunk, attend over the window: static
sizes, 3 chunks of a 12-token cache) leaves a view scatter the post-grad graph cannot settle: Inductor may
compute it inside its readers (no buffer) or realize it. Analysis-only (the gate's default) used to count
each as a copy, an upper bound, and failed the clean engine, split and fused K/V alike; a full compile's code
has no cache-sized buffer in any call. Now analysis-only has Inductor generate the code of each graph that
holds such a site (no kernel built) and settles it as a full compile does; a graph without one stays on the
fast path (no code generated). Where no code settles it, the site is undecided: never a copy, never clean
evidence for a negative control. Truth: the generated code of a full compile (caches off).
"""

from __future__ import annotations

import pytest
import torch
from _checks import pool_sized_allocations, without_generated_code

import ar_paging  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
from compile_checks import Case
from compile_checks.case import run_case
from compile_checks.check import backend
from compile_checks.check.findings import CloneReport

pytestmark = pytest.mark.compile

CHUNKS, TOKENS, H, D = 3, 4, 2, 8
CACHE = (1, CHUNKS * TOKENS, H, D)
CACHE_BYTES = CHUNKS * TOKENS * H * D * 4


def window_step(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Read the window, write the chunk by a slice, attend over the window (old values kept alive)."""
    old_k, old_v = k[:, :end] * 1, v[:, :end] * 1
    k[:, start:end] = x
    v[:, start:end] = x
    return (k[:, :end] + 0 * old_k).sum() + (v[:, :end] + 0 * old_v).sum()


def window_case(layout: str, expect_clean: bool = True) -> Case:
    if layout == "fused":
        kv = torch.zeros(2, *CACHE)
        k, v = kv[0], kv[1]
    else:
        k, v = torch.zeros(CACHE), torch.zeros(CACHE)
    x = torch.randn(1, TOKENS, H, D)

    def driver(step):
        return [step(k, v, x, c * TOKENS, (c + 1) * TOKENS) for c in range(CHUNKS)][-1]

    return Case(layout, window_step, driver=driver, pools={"k": k, "v": v}, expect_clean=expect_clean, dynamic=False)


def _codegen_seconds(report: CloneReport) -> list[float]:
    return [phases["codegen"] for _, phases in sorted(report.region_phase_seconds.items())]


@pytest.mark.parametrize("layout", ["split", "fused"])
def test_the_window_pattern_passes_the_default_mode_as_the_generated_code(layout: str) -> None:
    """Was: FAIL, 6 clones "(an upper bound ...; --full settles it)". Each region's code was generated (and
    only that: the post-grad graph ran), its scatters settled away: clean, as a full compile says."""
    result = run_case(window_case(layout), analysis_only=True)
    assert result.passed, result.failure_reasons()
    assert result.report.clean and not result.report.undecided and result.report.num_regions == CHUNKS
    assert all(s > 0 for s in _codegen_seconds(result.report))  # every region holds a choice: code generated
    settled = [n for n in result.report.notes if "allocates no buffer computed from it" in n]
    assert len(settled) == 2 * CHUNKS  # K and V of each chunk


def test_the_fused_window_full_compile_agrees() -> None:
    """The truth: a full compile's code allocates no cache-sized buffer in any region, and says clean."""
    from torch._inductor.utils import run_and_get_code

    result, codes = run_and_get_code(lambda: run_case(window_case("fused"), analysis_only=False))
    assert len(codes) == CHUNKS and [pool_sized_allocations(c, CACHE_BYTES) for c in codes] == [[]] * CHUNKS
    assert result.passed and result.report.clean and not result.report.undecided


def test_a_negative_control_is_never_passed_by_an_unsettled_choice(monkeypatch) -> None:
    """Negative control: with no code generated (as analysis-only was), the scatters are undecided. The clean
    expectation is not failed by them (no copy), and a negative control expecting copies is not passed by them."""
    without_generated_code(monkeypatch)
    clean = run_case(window_case("fused"), analysis_only=True)
    assert clean.passed and clean.report.clean and len(clean.report.undecided) == 2 * CHUNKS
    assert len([n for n in clean.report.notes if "undecided" in n and "Inductor generated no code" in n]) == 2 * CHUNKS
    control = run_case(window_case("fused", expect_clean=False), analysis_only=True)
    assert not control.passed and control.report.clean
    assert any("negative control stopped cloning" in r for r in control.failure_reasons())


def test_a_graph_without_a_choice_stays_on_the_fast_path() -> None:
    """The README's layouts: no site of Inductor's choice, no code generated (analysis-only's cost), the same
    verdicts as before: the split layout clean, the fused one cloning."""
    new = (torch.randn(4, 2, 8), torch.randn(4, 2, 8), torch.arange(4))

    def step(k_pool, v_pool, new_k, new_v, slots):
        torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slots)
        return k_pool.index_select(0, slots).sum() + v_pool.index_select(0, slots).sum()

    k, v, kv = torch.zeros(64, 2, 8), torch.zeros(64, 2, 8), torch.zeros(2, 64, 2, 8)
    split = run_case(Case("split", step, args=(k, v, *new), pools={"k": k, "v": v}), analysis_only=True)
    fused = run_case(
        Case("fused", step, args=(kv[0], kv[1], *new), pools={"k": kv[0], "v": kv[1]}, expect_clean=False),
        analysis_only=True,
    )
    assert split.passed and fused.passed and not fused.report.clean
    assert _codegen_seconds(split.report) == [0.0] and _codegen_seconds(fused.report) == [0.0]


def test_code_generation_that_raises_leaves_the_choice_undecided(monkeypatch) -> None:
    """Inductor's code cannot be read (here: reading its buffers raises): the region still runs its post-grad
    graph, and each choice is undecided with the reason, never a copy and never an error of the case."""

    def broken(graph_lowering):
        raise RuntimeError("no buffers today")

    monkeypatch.setattr(backend, "lowered_buffers", broken)
    result = run_case(window_case("split"), analysis_only=True)
    assert result.passed and result.report.clean and len(result.report.undecided) == 2 * CHUNKS
    assert any("code generation raised" in n and "RuntimeError: no buffers today" in n for n in result.report.notes)
