"""Writes through non-slice views of a pool: every view scatter Inductor can leave functional.

Functionalization turns ``k.diagonal().fill_(1)`` into ``diagonal_scatter`` (``as_strided_scatter``,
``select_scatter``, ``slice_scatter`` for the other views it scatters through). Inductor's reinplace
pass canonicalizes them into one ``_generalized_scatter``; one it must keep functional (the old pool is
read after the write) is decomposed back into view scatters (slice/select: fused into the write-back,
no buffer) or, through a ``diagonal`` or ``as_strided`` view, into ``aten.clone(k)``, a write into the
clone's view and a ``copy_`` back: a pool-sized buffer. ``unfold`` has no scatter op: its inverse rebuilds
the whole pool in a fresh buffer. Truth: the pool-sized buffers Inductor's generated code allocates; the
negative control is each write's clean twin (no read of the old pool; for unfold, the same rows written
through a ``view``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from _checks import pool_sized_allocations

from compile_checks.api import analyze_pool_clones
from compile_checks.scan.artifacts import GraphArtifacts
from compile_checks.scan.copies import scan_graph
from compile_checks.scan.inputs import PoolMap

POOL = (64, 16)
POOL_BYTES = 64 * 16 * 4

WRITES: dict[str, Callable[[torch.Tensor], object]] = {
    "diagonal": lambda k: k.diagonal().fill_(1.0),
    "as_strided": lambda k: k.as_strided((4, 4), (1, 16), 3).fill_(1.0),
    "select_then_diagonal": lambda k: k.view(4, 16, 16)[1].diagonal().fill_(1.0),
    # a select through a transpose: scattered and transposed back, fused into the write-back (no buffer)
    "transposed_select": lambda k: k.t()[2].fill_(1.0),
    # unfold has no scatter op: unfold_backward rebuilds the whole pool in a fresh buffer, read or not
    "unfold": lambda k: k.unfold(0, 2, 2)[3].fill_(1.0),
    "same_rows_through_a_view": lambda k: k.view(32, 2, 16)[3].fill_(1.0),  # unfold's clean twin
}


def _step(write: Callable[[torch.Tensor], object], read_first: bool) -> Callable[..., torch.Tensor]:
    def step(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        before = k[0:8].sum() if read_first else x.sum()  # the window read that Inductor sinks below the write
        write(k)
        return before + x.sum()

    return step


def _copies_and_buffers(name: str, read_first: bool) -> tuple[list[tuple[str, str, int]], list[int]]:
    from torch._inductor.utils import run_and_get_code

    k = torch.zeros(POOL)
    step = _step(WRITES[name], read_first)
    report, codes = run_and_get_code(lambda: analyze_pool_clones(step, k, torch.ones(3), pools={"k": k}))
    expected = torch.zeros(POOL)
    WRITES[name](expected)
    assert torch.equal(k, expected)  # the pool was written all the same
    copies = [(c.kind.value, c.pool, c.nbytes) for c in report.clones]
    return copies, pool_sized_allocations("\n".join(codes), POOL_BYTES)  # type: ignore[return-value]


@pytest.mark.compile
@pytest.mark.parametrize(
    ("name", "read_first", "expected"),
    [
        ("diagonal", True, 1),
        ("diagonal", False, 0),  # negative control: the clean twin
        ("as_strided", True, 1),
        ("select_then_diagonal", True, 1),
        ("transposed_select", True, 0),  # was a false copy: the scatter reaches the write-back through a view
        ("unfold", False, 1),  # a copy with no later read at all
        ("same_rows_through_a_view", False, 0),
    ],
)
def test_copies_agree_with_the_generated_code(name: str, read_first: bool, expected: int) -> None:
    copies, buffers = _copies_and_buffers(name, read_first)
    assert buffers == [POOL_BYTES] * expected  # the truth, from Inductor's code
    assert copies == [("aten_write_copy", "k", POOL_BYTES)] * expected


@pytest.mark.compile
def test_the_diagonal_copy_is_explained_by_the_later_read() -> None:
    """The copy names the read that made Inductor keep it (was: 0 copies; then ``other: no decision``)."""
    k = torch.zeros(POOL)
    report = analyze_pool_clones(_step(WRITES["diagonal"], True), k, torch.ones(3), pools={"k": k}, analysis_only=True)
    (copy,) = report.clones
    assert copy.explanation is not None and copy.explanation.cause == "read_after_write"
    assert "aten::sum" in copy.explanation.reason and not report.check_passed


# the post-grad graph of the diagonal step (a full compile's trace), as the scan reads it
_LOGGED = """class GraphModule(torch.nn.Module):
    def forward(self, arg0_1: "f32[64, 16][16, 1]cpu", arg1_1: "f32[3][1]cpu"):
        full_default: "f32[16][1]cpu" = torch.ops.aten.full.default([16], 1.0, dtype = torch.float32, layout = torch.strided, device = device(type='cpu'), pin_memory = False)
        clone: "f32[64, 16][16, 1]cpu" = torch.ops.aten.clone(arg0_1)
        diagonal_default: "f32[16][17]cpu" = torch.ops.aten.diagonal.default(clone)
        copy__default: "f32[16][17]cpu" = torch.ops.aten.copy_.default(diagonal_default, full_default);  diagonal_default = full_default = copy__default = None
        slice_1: "f32[8, 16][16, 1]cpu" = torch.ops.aten.slice.Tensor(arg0_1, 0, 0, 8)
        sum_1: "f32[][]cpu" = torch.ops.aten.sum.default(slice_1);  slice_1 = None
        copy_: "f32[64, 16][16, 1]cpu" = torch.ops.aten.copy_.default(arg0_1, clone);  arg0_1 = clone = copy_ = None
        return (sum_1,)
"""


def test_the_scan_finds_the_packet_clone_and_not_a_reinplaced_write() -> None:
    """The logged text names the clone by its packet (``torch.ops.aten.clone(...)``); re-inplaced (the
    write straight into the input's view, no clone) is the negative control."""
    found = _scan(_LOGGED)
    assert [(c["kind"], c["nbytes"]) for c in found.copies] == [("aten_write_copy", POOL_BYTES)]
    assert found.copies[0]["explanation"].startswith("read_after_write: `arg0_1` is read after the write, by sum_1")
    reinplaced = _LOGGED.replace("torch.ops.aten.clone(arg0_1)", "torch.ops.aten.alias.default(arg0_1)")
    assert _scan(reinplaced).copies == []


def _scan(text: str):
    art = GraphArtifacts(origin="test", rank=None, compile_id="0/0", post_grad=text)  # type: ignore[call-arg]
    return scan_graph(art, PoolMap({}), 0)
