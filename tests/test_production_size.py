"""A model built without allocating gets the verdict a real one gets: examples/wan14b_meta at a small width.

The example's Wan-like DiT (per-block compile, pools in a cache object) is built three ways at
``WAN_SMALL``: on real tensors, ``with torch.device("meta"):`` and under ``FakeTensorMode``. The copies
(names, counts, bytes, ops, regions) must be the real run's; the fused layout is the negative control
(one copy of each V pool), the split layout must stay clean. The production size (40 blocks of 5120)
runs from ``scripts/gate_example.sh``: too slow for this suite.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compile_checks import run_case
from compile_checks.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "wan14b_meta"
NO_VALUES = "no values: "

pytestmark = pytest.mark.compile


def example() -> ModuleType:
    """The example's ``cases.py`` (it imports its ``wan_dit`` from its own folder, as the gate loads it)."""
    if str(EXAMPLE) not in sys.path:
        sys.path.insert(0, str(EXAMPLE))
    spec = importlib.util.spec_from_file_location("wan14b_meta_cases", EXAMPLE / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copies(result: Any) -> list[tuple[Any, ...]]:
    return [(c.pool, c.nbytes, c.shape, c.dtype, c.region, c.op, c.kind) for c in result.report.clones]


def no_values_notes(result: Any) -> list[str]:
    return [n for n in [*result.notes, *result.report.notes] if n.startswith(NO_VALUES)]


@pytest.fixture(scope="module")
def fused() -> dict[str, Any]:
    cases = example()
    return {
        storage: run_case(cases.build_case("fused", layout="fused", cfg=cases.WAN_SMALL, storage=storage))
        for storage in cases.STORAGES
    }


def test_meta_and_fake_give_the_real_runs_copies(fused: dict[str, Any]) -> None:
    real = fused["real"]
    assert real.passed and not real.clean  # the negative control: the real run sees the copies
    assert [c[0] for c in copies(real)] == ["layer0.v", "layer1.v"]
    assert all(c[1] > 0 and c[5] == "ar_paging::paged_write" for c in copies(real))
    for storage in ("meta", "fake"):
        got = fused[storage]
        assert got.passed and got.analysis_only, storage
        assert copies(got) == copies(real), storage
        assert got.report.region_calls == real.report.region_calls, storage
        assert got.report.clone_bytes_per_run == real.report.clone_bytes_per_run > 0, storage


def test_one_note_says_what_was_skipped(fused: dict[str, Any]) -> None:
    assert no_values_notes(fused["real"]) == []
    (meta,) = no_values_notes(fused["meta"])
    (fake,) = no_values_notes(fused["fake"])
    assert "on meta (compiled as FakeTensors)" in meta and "as FakeTensors" in fake
    assert all("write checks" in n for n in (meta, fake))
    assert not fused["meta"].report.run_findings  # no write check ran, so none could fail on fake values


def test_full_mode_on_meta_is_analysis_only_with_the_note(pool_clone_check: Any) -> None:
    cases = example()
    small = cases.WAN_SMALL.__class__(**{**cases.WAN_SMALL.__dict__, "num_layers": 1})
    case = cases.build_case("split", layout="split", cfg=small)  # meta
    result = pool_clone_check.check(case, analysis_only=False)  # the plugin's route; fails the test unless clean
    assert result.clean and result.analysis_only
    (note,) = no_values_notes(result)
    assert "the full compile" in note


def test_gate_gives_the_verdict_of_a_meta_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["gate", f"{EXAMPLE / 'cases.py'}:small_cases", "--json", "--no-progress"])
    out = json.loads(capsys.readouterr().out)
    cases = {c["label"]: c for c in out["cases"]}
    assert code == 0, cases
    assert cases["split"]["clean"] and not cases["fused"]["clean"]
    assert [c["pool"] for c in cases["fused"]["clones"]] == ["layer0.v", "layer1.v"]
    assert all(c["passed"] and sum(n.startswith(NO_VALUES) for n in c["notes"]) == 1 for c in cases.values())


def _fused_step_report(device: str) -> Any:
    import torch

    import ar_paging.paged_write  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
    from compile_checks import analyze_pool_clones

    with torch.device(device):
        kv = torch.zeros(2, 16, 2, 8)
        new = torch.zeros(4, 2, 8)
        slots = torch.arange(4)
    k, v = kv.unbind(0)  # one allocation: the V pool is copied

    def step(k: torch.Tensor, v: torch.Tensor, new: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        torch.ops.ar_paging.paged_write(k, v, new, new * 2, slots)
        return new + 1

    return analyze_pool_clones(step, k, v, new, slots, pools={"layer0.k": k, "layer0.v": v}, analysis_only=True)


def test_library_on_meta_args_and_pools_gives_the_real_copy() -> None:
    real, meta = _fused_step_report("cpu"), _fused_step_report("meta")
    assert [c.pool for c in real.clones] == ["layer0.v"]  # the negative control: real sees the copy
    assert [(c.pool, c.nbytes, c.op) for c in meta.clones] == [(c.pool, c.nbytes, c.op) for c in real.clones]
    assert sum(n.startswith(NO_VALUES) for n in meta.notes) == 1


def test_plugin_session_on_fake_pools_sees_the_fused_copy(pool_clone_check: Any) -> None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    import ar_paging.paged_write  # noqa: F401  (registers torch.ops.ar_paging.paged_write)

    with FakeTensorMode():
        kv = torch.zeros(2, 16, 2, 8)
        new = torch.zeros(4, 2, 8)
    k, v = kv.unbind(0)

    def step(new: torch.Tensor) -> torch.Tensor:
        slots = torch.arange(4)  # made while the session runs: a FakeTensor too
        torch.ops.ar_paging.paged_write(k, v, new, new * 2, slots)
        return new + 1

    # the session fails the test on leaving the block unless the verdict is expect_clean
    with pool_clone_check.session(pools={"layer0.k": k, "layer0.v": v}, expect_clean=False) as s:
        s.compile(step)(new)
    (result,) = pool_clone_check.results
    assert [c.pool for c in result.report.clones] == ["layer0.v"] and result.analysis_only
    assert sum(n.startswith(NO_VALUES) for n in result.report.notes) == 1


def _four_blocks(monkeypatch: pytest.MonkeyPatch, fused: tuple[int, ...]) -> tuple[Any, list[int]]:
    """The example's split stack of 4 blocks on meta, the blocks in ``fused`` given fused pools; the result and
    how many post-grad graphs the check analysed (identical blocks compile to one graph: analysed once)."""
    import torch

    import compile_checks.check.analysis_cache as analysis_cache

    cases = example()
    cfg = cases.WAN_SMALL.__class__(**{**cases.WAN_SMALL.__dict__, "num_layers": 4})
    case = cases.build_case("planted", layout="split", cfg=cfg)
    cache = case.fn.kv_cache
    shape = tuple(cache.layers[0].k.shape)
    for i in fused:  # K and V of this block: two views of one allocation (its V pool is copied)
        cache.layers[i] = type(cache.layers[i])(*torch.zeros(2, *shape, dtype=cfg.dtype, device="meta").unbind(0))
    analysed: list[int] = []
    real_analyse = analysis_cache.analyse

    def counted(*args: Any) -> Any:
        analysed.append(1)
        return real_analyse(*args)

    monkeypatch.setattr(analysis_cache, "analyse", counted)
    return run_case(case.replace(expect_clean=not fused), analysis_only=True), analysed


def test_identical_blocks_are_analysed_once_and_attributed_per_block(monkeypatch: pytest.MonkeyPatch) -> None:
    result, analysed = _four_blocks(monkeypatch, fused=(0, 1, 2, 3))
    assert len(analysed) == 1  # four identical graphs, one analysis
    per_block = [(c.pool, c.region, c.nbytes) for c in result.report.clones]
    assert [p for p, _, _ in per_block] == [f"layer{i}.v" for i in range(4)]  # each block's own pool
    assert [r for _, r, _ in per_block] == [0, 1, 2, 3] and len({b for _, _, b in per_block}) == 1


def test_a_copy_planted_in_one_block_is_that_blocks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control of the analysis cache: one block unlike the others is analysed on its own."""
    result, analysed = _four_blocks(monkeypatch, fused=(2,))
    assert len(analysed) == 2  # the split graph once, the planted block's own
    assert [(c.pool, c.region) for c in result.report.clones] == [("layer2.v", 2)]
    assert result.passed
