"""PyTorch's own ``ReinplaceCounters`` beside the check: agreement where both count, a note where they differ.

A read of the old V pool after the commit makes Inductor clone V: PyTorch counts the argument as a
missed reinplace, the check finds the same bytes, and nothing is noted. K and V as two views of one
allocation: Inductor writes K in place and clones V without counting it missed (it never tries), so the
two disagree and the report says so. A planted disagreement (PyTorch's counter inflated) is noted too.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import ReinplaceCounters

from compile_checks.api import CloneCheck
from compile_checks.check.findings import CloneReport
from compile_checks.check.graph.geometry import TensorGeometry
from compile_checks.check.graph.sites import CloneSite
from compile_checks.check.reinplace_counters import disagreement_note


@torch.library.custom_op("cc_reinplace_counters::commit", mutates_args=("k", "v"))
def _commit(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> None:
    k[: x.shape[0]].copy_(x)
    v[: x.shape[0]].copy_(x)


@_commit.register_fake
def _(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> None:
    return None


def _read_after_write(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    old = v[:4] * 1  # the old V, read after the commit below: Inductor must keep a copy of V
    _commit(k, v, x)
    return old + v[:4]


def _commit_only(k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    _commit(k, v, x)
    return x + 1


def _checked(fn, k: torch.Tensor, v: torch.Tensor) -> tuple[CloneReport, list[int | None]]:
    check = CloneCheck(pools={"k": k, "v": v}, analysis_only=True)
    with check:
        check.compile(fn)(k, v, torch.ones(4, 8))
    assert check.report is not None
    counted = [i.reinplace_missed_bytes for r in check.probe.regions for i in r.inner]
    return check.report, counted


def _counter_notes(report: CloneReport) -> list[str]:
    return [n for n in report.notes if "ReinplaceCounters" in n]


@pytest.mark.compile
def test_agreement_is_not_noted() -> None:
    report, counted = _checked(_read_after_write, torch.zeros(64, 8), torch.zeros(64, 8))
    assert [(c.pool, c.nbytes) for c in report.clones] == [("v", 64 * 8 * 4)]
    assert counted == [64 * 8 * 4]  # PyTorch recorded the same missed bytes
    assert _counter_notes(report) == []


@pytest.mark.compile
def test_a_planted_disagreement_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for the agreement: PyTorch's counter, inflated by 1000 bytes, is noted as differing."""
    original = ReinplaceCounters.add_missed_bytes.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        ReinplaceCounters, "add_missed_bytes", classmethod(lambda cls, trigger, n: original(cls, trigger, n + 1000))
    )
    report, counted = _checked(_read_after_write, torch.zeros(64, 8), torch.zeros(64, 8))
    assert counted == [64 * 8 * 4 + 1000]
    assert _counter_notes(report) == [
        f"region 0: PyTorch's ReinplaceCounters records {64 * 8 * 4 + 1000} missed bytes in this graph's reinplace "
        f"pass, the check {64 * 8 * 4} bytes of clones of caller tensors (PyTorch leaves out an argument cloned "
        "because another was written in place into its storage, counts clones of intermediates and whole arguments "
        "or bases); the check's figure is what the final graph copies"
    ]


@pytest.mark.compile
def test_a_shared_storage_clone_is_one_pytorch_does_not_count() -> None:
    """K written in place, V (the same storage) cloned without being tried: PyTorch counts 0, the check V's clone."""
    kv = torch.zeros(2, 64, 8)
    report, counted = _checked(_commit_only, kv[0], kv[1])
    assert [c.pool for c in report.clones] == ["v"] and report.clone_bytes > 0
    assert counted == [0]
    notes = _counter_notes(report)
    assert len(notes) == 1 and "records 0 missed bytes" in notes[0] and f"check {report.clone_bytes} bytes" in notes[0]


def _site(shape: tuple[int, ...], exprs: object = None) -> CloneSite:
    geo = TensorGeometry(shape=shape, stride=(1,), storage_offset=0, dtype=torch.float32, exprs=exprs)
    return CloneSite(
        op="x::w",
        arg="v",
        clone_node="clone",
        placeholder="v",
        placeholder_index=0,
        clone=geo,
        view=geo,
        clone_source_offset=0,
        clones_whole_input=False,
    )


def test_what_is_compared() -> None:
    assert disagreement_note(0, 64, [_site((16,))]) is None  # 16 float32 = 64 bytes: agreement
    assert disagreement_note(0, 0, [_site((16,))]) is not None
    assert disagreement_note(0, None, [_site((16,))]) is None  # no counter in this torch: nothing to compare
    assert disagreement_note(0, 0, [_site((16,), exprs=("s0",))]) is None  # symbolic: PyTorch counts 0 there
