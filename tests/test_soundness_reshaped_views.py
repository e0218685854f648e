"""Writes through a reshape or dtype view of a pool, and view scatters whose buffer is Inductor's choice.

Truth: the generated code of the compile (caches off). A write through ``k.view(NB, BS, H, D)``,
``k.unsqueeze(0)[0]`` or a ``uint8`` pool viewed as ``float32`` makes Inductor allocate a whole-pool buffer
and copy it back every call (was: clean, "no buffer of its own"). A split cache read, then written by a
slice, gets no buffer under any ``dynamic`` setting (was: 2 to 4 certain copies). The post-grad graph cannot
tell: both modes settle such a site from Inductor's generated code (analysis-only has it generated for that
graph alone, no kernel built) by identity (the buffer computed from the scatter), never by byte size alone.
Negative controls: each write's clean twin; the old byte-size rule, which takes a returned activation for the
copy; and a check with no generated code, where the site stays undecided (no copy, no clean verdict either).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from _checks import pool_sized_allocations, without_generated_code
from torch._inductor.utils import run_and_get_code

from compile_checks.api import CloneCheck
from compile_checks.check.findings import CloneReport
from compile_checks.check.graph.generated_buffers import settle_inductors_choices
from compile_checks.verdict import copy_fields, render_copy

pytestmark = pytest.mark.compile

H, D = 2, 8
POOL_BYTES = 64 * H * D * 4


def _reshaped(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    k.view(8, 8, H, D)[2][3] = x[0]
    return x.sum()


def _unsqueezed(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    k.unsqueeze(0)[0].index_copy_(0, torch.arange(60, 64), x)
    return x.sum()


def _dtype_view(raw: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    raw.view(torch.float32)[:, 0:D] = x[0, 0]
    return x.sum()


def _direct(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    k[19] = x[0]  # the reshaped write's slot, written with no view: the clean twin
    return x.sum()


def _pool(name: str) -> torch.Tensor:
    return torch.zeros(64, H * D * 4, dtype=torch.uint8) if name == "dtype_view" else torch.zeros(64, H, D)


WRITES: dict[str, Callable[..., torch.Tensor]] = {
    "reshape": _reshaped,
    "unsqueeze": _unsqueezed,
    "dtype_view": _dtype_view,
    "direct": _direct,
}


def _check(step, calls, pools, *, full: bool, **compile_kw) -> tuple[CloneReport, list[str]]:
    check = CloneCheck(pools=pools, analysis_only=not full)

    def run() -> None:
        with check:
            compiled = check.compile(step, **compile_kw)
            for args in calls:
                compiled(*args)

    _, codes = run_and_get_code(run) if full else (None, [])
    if not full:
        run()
    assert check.report is not None and check.report.errors == []
    return check.report, codes


@pytest.mark.parametrize(
    ("name", "copies", "choice"),
    [
        ("reshape", 1, True),
        # the index_put into the view always clones it (certain); its scatter back through the unsqueeze may be
        # realized too (Inductor's choice): the generated code has no second buffer, so it is settled away
        ("unsqueeze", 1, True),
        ("dtype_view", 1, True),
        ("direct", 0, False),
    ],
)
def test_writes_through_reshaped_and_dtype_views_agree_with_the_generated_code(
    name: str, copies: int, choice: bool
) -> None:
    pool, x = _pool(name), torch.randn(4, H, D)
    full, codes = _check(WRITES[name], [(pool, x)], {"pool": pool}, full=True)
    truth = [b for code in codes for b in pool_sized_allocations(code, POOL_BYTES)]
    assert truth == [POOL_BYTES] * copies  # the generated code's whole-pool buffers
    assert [(c.pool, c.nbytes, c.calls) for c in full.clones] == [("pool", POOL_BYTES, 1)] * copies
    pool = _pool(name)
    analysis, _ = _check(WRITES[name], [(pool, x)], {"pool": pool}, full=False)
    # analysis-only: the same copy, settled from the generated code where it is Inductor's choice
    assert [(c.nbytes, c.upper_bound) for c in analysis.clones] == [(POOL_BYTES, False)] * copies
    assert not analysis.undecided and not any("no buffer of its own" in n for n in analysis.notes)
    codegen = analysis.region_phase_seconds[0]["codegen"]
    assert (codegen > 0) == choice  # only a graph that holds a choice has its code generated: the fast path stays
    lines = [render_copy(copy_fields(c)) for c in analysis.clones + full.clones]
    assert not any("undecided" in line for line in lines)


@pytest.mark.parametrize("name", ["reshape", "dtype_view"])
def test_with_no_generated_code_a_choice_is_undecided_never_a_copy(name: str, monkeypatch) -> None:
    """Negative control: unsettled (no code generated), the copy of the test above is undecided: not in
    ``clones``, listed in ``undecided`` with a note saying why, so neither a clean nor a cloning verdict."""
    without_generated_code(monkeypatch)
    pool, x = _pool(name), torch.randn(4, H, D)
    analysis, _ = _check(WRITES[name], [(pool, x)], {"pool": pool}, full=False)
    assert analysis.clones == [] and [(c.nbytes, c.upper_bound) for c in analysis.undecided] == [(POOL_BYTES, True)]
    assert any("reshape or dtype view" in n and "undecided" in n for n in analysis.notes)
    assert "undecided" in render_copy(copy_fields(analysis.undecided[0]))


def _read_then_slice(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, end: int) -> torch.Tensor:
    """A split cache: the window read first, then the chunk written by a slice, then the window attended."""
    old_k, old_v = k[:, :end] * 1, v[:, :end] * 1
    k[:, end - 4 : end] = x
    v[:, end - 4 : end] = x
    return (k[:, :end] + 0 * old_k).sum() + (v[:, :end] + 0 * old_v).sum()


CACHE = (1, 16, H, D)
CACHE_BYTES = 16 * H * D * 4


@pytest.mark.parametrize(
    ("dynamic", "ends"), [(None, (8, 12, 16)), (True, (8, 12, 16)), (False, (16,))], ids=["none", "true", "static"]
)
def test_a_clean_split_read_then_slice_write_is_no_certain_copy(dynamic: bool | None, ends: tuple[int, ...]) -> None:
    x = torch.randn(1, 4, H, D)

    def calls(k, v):
        return [(k, v, x, e) for e in ends]

    k, v = torch.zeros(CACHE), torch.zeros(CACHE)
    full, codes = _check(_read_then_slice, calls(k, v), {"k": k, "v": v}, full=True, dynamic=dynamic)
    # the truth: no cache-sized buffer, and no symbolic allocation that could be one
    assert [pool_sized_allocations(code, CACHE_BYTES) for code in codes] == [[]] * len(codes)
    assert all("empty_strided_cpu((s" not in code for code in codes)
    assert full.clean and full.check_passed
    k, v = torch.zeros(CACHE), torch.zeros(CACHE)
    analysis, _ = _check(_read_then_slice, calls(k, v), {"k": k, "v": v}, full=False, dynamic=dynamic)
    # analysis-only (the gate's default) says what the code says: clean (was: 2 to 4 upper-bound copies)
    assert analysis.clean and analysis.check_passed and not analysis.undecided
    assert any("allocates no buffer computed from it" in n for n in analysis.notes)


def _read_then_slice_returning_a_pool_sized_activation(k, v, x, end: int):
    out = _read_then_slice(k, v, x, end)
    return out, torch.ones(CACHE) * x.sum()  # a returned activation of the cache's byte size


def test_a_full_compile_settles_by_identity_not_by_byte_size(monkeypatch) -> None:
    """The returned activation is a cache-sized buffer in the code; it is no copy of the cache."""
    x = torch.randn(1, 4, H, D)
    k, v = torch.zeros(CACHE), torch.zeros(CACHE)
    step = _read_then_slice_returning_a_pool_sized_activation
    full, codes = _check(step, [(k, v, x, 16)], {"k": k, "v": v}, full=True, dynamic=False)
    (code,) = codes
    assert pool_sized_allocations(code, CACHE_BYTES) == [CACHE_BYTES]  # the activation
    assert full.clean and any("allocates no buffer computed from it" in n for n in full.notes)
    # negative control: settled by byte size alone, the activation is taken for one of the two copies
    without_generated_code(monkeypatch)
    k, v = torch.zeros(CACHE), torch.zeros(CACHE)
    analysis, _ = _check(step, [(k, v, x, 16)], {"k": k, "v": v}, full=False, dynamic=False)
    sites = [_site(c) for c in analysis.undecided]
    kept, _ = settle_inductors_choices(sites, code)
    assert len(kept) == 1


def _site(c):
    from compile_checks.check.graph.geometry import TensorGeometry
    from compile_checks.check.graph.sites import CloneSite

    geo = TensorGeometry(c.shape, (1,) * len(c.shape), 0, c.dtype)
    return CloneSite(
        op=c.op, arg=c.arg, clone_node=c.node, placeholder="k", placeholder_index=0, clone=geo, view=geo,
        clone_source_offset=0, clones_whole_input=False, buffer_is_inductors_choice=True,
    )  # fmt: skip
