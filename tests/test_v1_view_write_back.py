"""A pool passed as a view of one graph input under v1 ``auto_functionalized`` (``kv[0]``/``kv[1]``).

v1 writes each mutated view back through a view scatter into the base input
(``copy_(kv, select_scatter(select_scatter(kv, new_k, 0, 0), new_v, 0, 1))``), and Inductor's
reinplace pass never re-inplaces such a view: it clones K and V. The check must follow the
scatter chain to see those clones written back (and not report the scatter-back as a second
copy), and explain them as ``view_of_input_v1`` at the user's ``paged_write`` line.
Hand-built graphs for the rules; one analysis-only run of the ``fused_kv_v1`` scenario.
"""

from __future__ import annotations

import operator
from pathlib import Path

import pytest
import torch
import torch.fx
from torch._inductor.fx_passes import reinplace as inductor_reinplace
from torch._subclasses.fake_tensor import FakeTensorMode

import ar_paging  # noqa: F401 - registers torch.ops.ar_paging.paged_write
from compile_checks.check.graph.aten_writes import find_aten_write_copies
from compile_checks.check.graph.copies import find_copy_sites, written_back_from
from compile_checks.explain.explanations import FIXES
from compile_checks.explain.refusals.replay import cloned_args, explain_refusals
from compile_checks.vocab import CAUSES, CopyKind

ATEN_WRITE_COPY = CopyKind.ATEN_WRITE_COPY
FUNCTIONALIZATION_CLONE = CopyKind.FUNCTIONALIZATION_CLONE

aten = torch.ops.aten
N, H, D, T = 64, 2, 4, 8
POOL = N * H * D  # elements of one of K, V
USER_FILE = "/home/user/engine/model.py"
ROOT = Path(__file__).resolve().parent.parent


class Graph:
    """An FX graph whose ``call`` runs each op on fake tensors to fill ``meta["val"]``."""

    def __init__(self) -> None:
        self.graph = torch.fx.Graph()
        self.mode = FakeTensorMode()

    def input(self, name: str, *shape: int, dtype: torch.dtype = torch.float32) -> torch.fx.Node:
        n = self.graph.placeholder(name)
        with self.mode:
            n.meta["val"] = torch.empty(*shape, dtype=dtype)
        return n

    def call(self, target, *args, **kwargs) -> torch.fx.Node:  # type: ignore[no-untyped-def]
        n = self.graph.call_function(target, args, kwargs)
        val = lambda a: a.meta["val"] if isinstance(a, torch.fx.Node) else a  # noqa: E731
        with self.mode:
            n.meta["val"] = target(*[val(a) for a in args], **{k: val(v) for k, v in kwargs.items()})
        return n

    def done(self) -> torch.fx.Graph:
        self.graph.output(())
        return self.graph


def decomposed_v1_fused_kv(*, write_back: bool, scatter_clones: bool = True) -> torch.fx.Graph:
    """The final graph ``decompose_auto_functionalized`` leaves for v1 ``paged_write(kv[0], kv[1])``
    (as in ``fused_kv_v1``'s post-grad graph): K cloned (one pool), V cloned with the span from the
    storage start (two pools), the op writes the clones, scatters + ``copy_`` write them back."""
    g = Graph()
    kv = g.input("kv", 2, N, H, D)
    new = g.input("new", T, H, D)
    slots = g.input("slots", T, dtype=torch.long)
    k, v = g.call(aten.select.int, kv, 0, 0), g.call(aten.select.int, kv, 0, 1)
    ck = g.call(aten.clone.default, g.call(aten.as_strided.default, k, [POOL], [1], 0))
    cv = g.call(aten.clone.default, g.call(aten.as_strided.default, v, [2 * POOL], [1], 0))
    k_new = g.call(aten.as_strided.default, ck, [N, H, D], [H * D, D, 1], 0)
    v_new = g.call(aten.as_strided.default, cv, [N, H, D], [H * D, D, 1], POOL)
    g.graph.call_function(torch.ops.ar_paging.paged_write.default, (k_new, v_new, new, new, slots))
    if write_back:
        k_src, v_src = (k_new, v_new) if scatter_clones else (new, new)
        if not scatter_clones:  # plain values scattered into the input: `kv[0, :T] = new` style writes
            k_src = v_src = g.call(aten.new_empty.default, kv, [N, H, D])
        first = g.call(aten.select_scatter.default, kv, k_src, 0, 0)
        both = g.call(aten.select_scatter.default, first, v_src, 0, 1)
        g.call(aten.copy_.default, kv, both)
    return g.done()


def test_clones_scattered_back_are_written_back_and_counted_once() -> None:
    graph = decomposed_v1_fused_kv(write_back=True)
    # the scatter-back alone is one pass over kv fused into the copy_, no buffer (issue 16 item 5)
    assert find_aten_write_copies(graph) == []
    sites = find_copy_sites(graph)
    assert [(s.kind, s.arg, s.placeholder, s.clone.nbytes) for s in sites] == [
        (FUNCTIONALIZATION_CLONE, "k_pool", "kv", POOL * 4),
        (FUNCTIONALIZATION_CLONE, "v_pool", "kv", 2 * POOL * 4),
    ]
    # each clone writes back one pool (the scattered view), not the whole (2, ...) input
    assert [sum(g.nbytes for g in s.written) for s in sites] == [POOL * 4, POOL * 4]
    by_node = {n.name: geos for n, geos in written_back_from(graph).items()}
    assert {s.clone_node for s in sites} <= set(by_node)


def test_clones_never_written_back_are_the_users_own_copies() -> None:
    """``kc, vc = kv[0].clone(), kv[1].clone(); op(kc, vc)``: no copy_ epilogue, no pool copy."""
    graph = decomposed_v1_fused_kv(write_back=False)
    assert find_copy_sites(graph) == []
    assert not any(n.target is aten.clone.default for n in written_back_from(graph))


def test_scatter_chain_of_plain_values_is_one_pass_not_a_copy() -> None:
    """Issue 16 item 5: a chain of view scatters of plain values written back into kv is lowered
    as one read-modify-write pass over kv with no buffer: noted, not counted as a copy (it used to
    be an ATen write copy; tests/test_ar_loop_counts.py holds the range commit to the generated code)."""
    from compile_checks.check.graph.aten_writes import whole_pool_passes

    graph = decomposed_v1_fused_kv(write_back=True, scatter_clones=False)
    assert find_copy_sites(graph) == []  # the clones are not written back, the scatters allocate nothing
    notes = whole_pool_passes(graph)
    assert len(notes) == 2 and all("aten::select_scatter into kv" in n for n in notes)
    # with the clone names passed, a chain that scatters them is their write-back: no note either
    scattered = decomposed_v1_fused_kv(write_back=True)
    clones = {n.name for n in scattered.nodes if n.target is aten.clone.default}
    assert len(clones) == 2 and whole_pool_passes(scattered, clones) == []


def v1_fused_kv_before_reinplace(version: str) -> torch.fx.Graph:
    """What the reinplace pass receives for ``paged_write(kv[0], kv[1])`` under v1 or v2."""
    g = Graph()
    kv = g.input("kv", 2, N, H, D)
    new = g.input("new", T, H, D)
    slots = g.input("slots", T, dtype=torch.long)
    k, v = g.call(aten.select.int, kv, 0, 0), g.call(aten.select.int, kv, 0, 1)
    kwargs = {"new_k": new, "new_v": new, "slot_mapping": slots}
    if version == "v1":
        af = g.graph.call_function(
            torch.ops.higher_order.auto_functionalized,
            (torch.ops.ar_paging.paged_write.default,),
            {"k_pool": k, "v_pool": v, **kwargs},
        )
        outs = []
        for i, view in ((1, k), (2, v)):
            out = g.graph.call_function(operator.getitem, (af, i))
            with g.mode:
                out.meta["val"] = torch.empty_like(view.meta["val"])
            outs.append(out)
        first = g.call(aten.select_scatter.default, kv, outs[0], 0, 0)
        g.call(aten.copy_.default, kv, g.call(aten.select_scatter.default, first, outs[1], 0, 1))
    else:
        af = g.graph.call_function(
            torch.ops.higher_order.auto_functionalized_v2,
            (torch.ops.ar_paging.paged_write.default,),
            {
                **kwargs,
                "_k_pool_base_index": 0,
                "_k_pool_size": [N, H, D],
                "_k_pool_stride": [H * D, D, 1],
                "_k_pool_storage_offset": 0,
                "_v_pool_base_index": 0,
                "_v_pool_size": [N, H, D],
                "_v_pool_stride": [H * D, D, 1],
                "_v_pool_storage_offset": POOL,
                "_all_bases": [kv],
            },
        )
        out = g.graph.call_function(operator.getitem, (af, 1))
        with g.mode:
            out.meta["val"] = torch.empty_like(kv.meta["val"])
        g.call(aten.copy_.default, kv, out)
    af.meta["stack_trace"] = (
        f'  File "{USER_FILE}", line 63, in _commit\n    torch.ops.ar_paging.paged_write(k_pool, v_pool, k_new, v_new, slots)\n'
    )
    return g.done()


def test_v1_view_of_input_is_refused_as_inductor_does() -> None:
    graph = v1_fused_kv_before_reinplace("v1")
    refusals = explain_refusals(graph)
    assert [(r.cause, r.args, r.placeholder) for r in refusals] == [
        ("view_of_input_v1", ("k_pool",), "kv"),
        ("view_of_input_v1", ("v_pool",), "kv"),
    ]
    assert "aten::select_scatter" in refusals[0].detail and "auto_functionalized_v2" in refusals[0].detail
    assert refusals[0].user_line == f"{USER_FILE}:63"
    inductor_reinplace.reinplace_inplaceable_ops_core(graph)
    assert cloned_args(graph) == {(r.node, r.args) for r in refusals}  # Inductor clones exactly these


def test_v2_writes_the_same_views_in_place() -> None:
    """The contrast the fix relies on: under v2 Inductor clones nothing for the same program."""
    graph = v1_fused_kv_before_reinplace("v2")
    assert explain_refusals(graph) == []
    inductor_reinplace.reinplace_inplaceable_ops_core(graph)
    assert cloned_args(graph) == set()


def test_view_of_input_v1_is_a_cause_with_its_fix() -> None:
    assert "view_of_input_v1" in CAUSES
    fix = FIXES["view_of_input_v1"]
    assert "separate tensors" in fix and "enable_auto_functionalized_v2" in fix


@pytest.mark.compile
def test_fused_kv_v1_reports_k_and_v_clones_explained_as_view_of_input_v1() -> None:
    """Negative control end to end: every layer's K and V clone, once each, with a concrete explanation."""
    from compile_checks import run_case
    from compile_checks.scenarios import SCENARIOS, scenario_case

    s = SCENARIOS["fused_kv_v1"]
    r = run_case(scenario_case("fused_kv_v1"), analysis_only=True)
    clones = r.report.clones
    pools = {f"layer{i}.{kv}" for i in range(s.num_layers) for kv in "kv"}
    assert sorted(c.pool for c in clones) == sorted(pools)  # each pool once: no scatter-back duplicate
    assert {(c.op, c.kind) for c in clones} == {("ar_paging::paged_write", FUNCTIONALIZATION_CLONE)}
    assert {c.arg for c in clones if c.pool.endswith(".k")} == {"k_pool"}
    assert {c.arg for c in clones if c.pool.endswith(".v")} == {"v_pool"}
    assert not any("never written back" in n for n in r.report.notes), r.report.notes
    for c in clones:
        e = c.explanation
        assert e is not None and e.cause == "view_of_input_v1", e
        assert e.user_line is not None and e.user_line.startswith("compile_checks/scenarios/model.py:")
        path, line = e.user_line.rsplit(":", 1)
        assert "paged_write(" in (ROOT / path).read_text().splitlines()[int(line) - 1]
        assert e.fix == FIXES["view_of_input_v1"]
