"""One hand-built FX graph per cause class: the replayed reinplace rule, its evidence, the user line.

Each graph is what Inductor's reinplace pass receives (``auto_functionalized_v2`` of
``ar_paging::paged_write`` + ``copy_`` epilogue), with fake-tensor metadata and a user stack
trace on the nodes. Where Inductor's own pass can run on the same graph, its decision is
compared with the replay: a replay that disagrees with Inductor is a failing test.
"""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx
from torch._inductor.fx_passes import reinplace as inductor_reinplace
from torch._subclasses.fake_tensor import FakeTensorMode

import ar_paging  # noqa: F401 - registers torch.ops.ar_paging.paged_write
from compile_checks.check.findings import SurvivingClone
from compile_checks.explain.culprit_pass import GraphRecord, PassStep, find_culprit
from compile_checks.explain.explanations import FIXES, explanation_of, fix_for
from compile_checks.explain.refusals.replay import cloned_args, explain_refusals, reconcile
from compile_checks.vocab import CAUSES

USER_FILE = "/home/user/engine/model.py"
AF_V2 = torch.ops.higher_order.auto_functionalized_v2
N, H, D, T = 64, 2, 4, 8


def _trace(line: int, code: str) -> str:
    torch_file = torch.__file__.replace("__init__.py", "_ops.py")
    return f'  File "{USER_FILE}", line {line}, in forward\n    {code}\n  File "{torch_file}", line 1, in __call__\n    x\n'


class Builder:
    """A graph with fake-tensor ``meta["val"]`` on every node, as AOT autograd leaves it."""

    def __init__(self) -> None:
        self.graph = torch.fx.Graph()
        self.mode = FakeTensorMode()

    def placeholder(self, name: str, val: torch.Tensor) -> torch.fx.Node:
        n = self.graph.placeholder(name)
        n.meta["val"] = val
        return n

    def call(self, target, args, kwargs=None, val=None, line=None, code="") -> torch.fx.Node:  # type: ignore[no-untyped-def]
        n = self.graph.call_function(target, tuple(args), kwargs or {})
        if val is not None:
            n.meta["val"] = val
        if line is not None:
            n.meta["stack_trace"] = _trace(line, code)
        return n

    def paged_write(self, k: torch.fx.Node, v: torch.fx.Node, *, write_back: bool = True) -> torch.fx.Node:
        """``auto_functionalized_v2(paged_write)`` at model.py:42, and the ``copy_`` epilogue."""
        with self.mode:
            new = torch.empty(T, H, D)
            slots = torch.empty(T, dtype=torch.long)
        nk = self.placeholder("new_k", new)
        nv = self.placeholder("new_v", new)
        sl = self.placeholder("slots", slots)
        af = self.call(
            AF_V2,
            [torch.ops.ar_paging.paged_write.default],
            {
                "new_k": nk,
                "new_v": nv,
                "slot_mapping": sl,
                "_k_pool_base_index": 0,
                "_v_pool_base_index": 1,
                "_all_bases": [k, v],
            },
            line=42,
            code="torch.ops.ar_paging.paged_write(k_pool, v_pool, new_k, new_v, slots)",
        )
        self.written = [self.call(operator.getitem, [af, i + 1], val=self._like(b)) for i, b in enumerate((k, v))]
        if write_back:
            self.epilogue = [(b, g) for b, g in zip((k, v), self.written)]
        else:
            self.epilogue = []
        return af

    def finish(self, outputs=()) -> torch.fx.Graph:  # type: ignore[no-untyped-def]
        for dst, src in self.epilogue:
            self.call(torch.ops.aten.copy_.default, [dst, src], val=dst.meta["val"])
        self.graph.output(tuple(outputs))
        return self.graph

    def _like(self, n: torch.fx.Node) -> torch.Tensor:
        with self.mode:
            return torch.empty_like(n.meta["val"])


def split_pools(b: Builder) -> tuple[torch.fx.Node, torch.fx.Node]:
    with b.mode:
        k, v = torch.empty(N, H, D), torch.empty(N, H, D)
    return b.placeholder("k_pool", k), b.placeholder("v_pool", v)


def inductor_clones(graph: torch.fx.Graph) -> set[tuple[str, tuple[str, ...]]]:
    """Run Inductor's own reinplace core on ``graph``; what it decided to clone."""
    inductor_reinplace.reinplace_inplaceable_ops_core(graph)
    return cloned_args(graph)


def test_shared_storage_names_the_other_argument_and_matches_inductor() -> None:
    b = Builder()
    with b.mode:
        kv = torch.empty(2, N, H, D)
        k_val, v_val = kv[0], kv[1]
    k, v = b.placeholder("k_pool", k_val), b.placeholder("v_pool", v_val)
    b.paged_write(k, v)
    graph = b.finish()
    [r] = explain_refusals(graph)
    assert (r.cause, r.args, r.other_args, r.other_base) == ("shared_storage", ("v_pool",), ("k_pool",), "k_pool")
    assert r.user_line == f"{USER_FILE}:42"
    assert {(r.node, r.args)} == inductor_clones(graph)


def test_read_after_write_names_the_reading_node_and_its_line() -> None:
    b = Builder()
    k, v = split_pools(b)
    af = b.paged_write(k, v)
    with b.mode:
        idx_val = torch.empty(T, dtype=torch.long)
        gathered = torch.empty(T, H, D)
    idx = b.placeholder("win_slots", idx_val)
    # the window gather of K placed after the write (what reorder_for_locality does)
    read = b.call(torch.ops.aten.index.Tensor, [k, [idx]], val=gathered, line=59, code="k_pool.index_select(0, slots)")
    graph = b.finish(outputs=(read,))
    [r] = explain_refusals(graph)
    assert (r.cause, r.args, r.node) == ("read_after_write", ("k_pool",), af.name)
    assert [(x.node, x.op, x.user_line) for x in r.readers] == [(read.name, "aten::index", f"{USER_FILE}:59")]
    assert {(r.node, r.args)} == inductor_clones(graph)


def test_read_before_write_is_no_refusal() -> None:
    """Negative control for the rule: the same gather placed before the write is reinplaceable."""
    b = Builder()
    k, v = split_pools(b)
    with b.mode:
        idx_val, gathered = torch.empty(T, dtype=torch.long), torch.empty(T, H, D)
    idx = b.placeholder("win_slots", idx_val)
    read = b.call(torch.ops.aten.index.Tensor, [k, [idx]], val=gathered)
    b.paged_write(k, v)
    graph = b.finish(outputs=(read,))
    assert explain_refusals(graph) == []
    assert inductor_clones(graph) == set()


def test_input_not_written_back() -> None:
    b = Builder()
    k, v = split_pools(b)
    b.paged_write(k, v, write_back=False)
    graph = b.finish()
    refusals = explain_refusals(graph)
    assert [(r.cause, r.args) for r in refusals] == [
        ("view_not_written_back", ("k_pool",)),
        ("view_not_written_back", ("v_pool",)),
    ]
    assert "never written back" in refusals[0].detail
    assert {(r.node, r.args) for r in refusals} == inductor_clones(graph)


def test_view_of_input_not_written_back() -> None:
    b = Builder()
    with b.mode:
        kv_val = torch.empty(2, N, H, D)
    kv = b.placeholder("kv_cache", kv_val)
    with b.mode:
        k_val, v_val = kv_val[0], kv_val[1]
    k = b.call(torch.ops.aten.select.int, [kv, 0, 0], val=k_val)
    v = b.call(torch.ops.aten.select.int, [kv, 0, 1], val=v_val)
    b.paged_write(k, v, write_back=False)
    graph = b.finish()
    refusals = explain_refusals(graph)
    assert [(r.cause, r.args, r.placeholder) for r in refusals] == [
        ("view_not_written_back", ("k_pool",), "kv_cache"),
        ("view_not_written_back", ("v_pool",), "kv_cache"),
    ]
    assert "view of graph input `kv_cache`" in refusals[0].detail


def test_output_alias_of_a_written_intermediate() -> None:
    b = Builder()
    with b.mode:
        x_val = torch.empty(N, H, D)
        buf_val = torch.empty(N, H, D)
    x = b.placeholder("x", x_val)
    k = b.call(torch.ops.aten.mul.Tensor, [x, 2], val=buf_val)
    with b.mode:
        v_val = torch.empty(N, H, D)
    v = b.call(torch.ops.aten.mul.Tensor, [x, 3], val=v_val)
    b.paged_write(k, v, write_back=False)
    graph = b.finish(outputs=(k,))  # the graph returns the buffer it wrote into
    [r] = explain_refusals(graph)
    assert (r.cause, r.args) == ("output_alias", ("k_pool",))
    assert [x.op for x in r.readers] == ["output"]
    assert {(r.node, r.args)} == inductor_clones(graph)


def test_unpredicted_clone_is_other_with_inductors_log_never_unknown() -> None:
    b = Builder()
    k, v = split_pools(b)
    af = b.paged_write(k, v)
    graph = b.finish()
    assert explain_refusals(graph) == []
    af.meta["only_clone_these_tensors"] = [0]  # Inductor cloned k_pool for a reason the replay does not know
    log = {af.name: "Reinplace for ar_paging::paged_write (wrapped by auto_functionalized_v2): ..."}
    [r] = reconcile([], graph, log)
    assert (r.cause, r.args, r.inductor_log) == ("other", ("k_pool",), log[af.name])
    assert "Inductor: Reinplace for ar_paging::paged_write" in r.detail


def test_find_culprit_names_the_pass_that_moved_the_read() -> None:
    passes = [
        PassStep("remove_noop_ops", ("read", "write"), ("read", "write")),
        PassStep("reorder_for_locality", ("read", "write"), ("write", "read")),
        PassStep("stable_sort", ("write", "read"), ("write", "read")),
    ]
    assert find_culprit(passes, "read", "write") == "reorder_for_locality"
    # negative control: the read was after the write in the program itself
    assert find_culprit(passes[2:], "read", "write") is None


def _clone(arg: str, pool: str) -> SurvivingClone:
    return SurvivingClone(
        op="ar_paging::paged_write", arg=arg, nbytes=2048, shape=(512,), dtype=torch.float32, pool=pool
    )


def test_explanation_of_read_after_write_with_culprit_and_fix() -> None:
    b = Builder()
    k, v = split_pools(b)
    b.paged_write(k, v)
    with b.mode:
        idx_val, gathered = torch.empty(T, dtype=torch.long), torch.empty(T, H, D)
    idx = b.placeholder("win_slots", idx_val)
    read = b.call(torch.ops.aten.index.Tensor, [k, [idx]], val=gathered, line=59)
    [r] = explain_refusals(b.finish(outputs=(read,)))
    record = GraphRecord(region=0, ordinal=0, refusals=[r], culprits={0: "reorder_for_locality"}, verified={0: True})
    e = explanation_of(r, record, 0, _clone("k_pool", "layer0.k"))
    assert e.cause == "read_after_write" and e.user_line == f"{USER_FILE}:42"
    assert e.conflicting[0].node == read.name and e.conflicting[0].user_line == f"{USER_FILE}:59"
    assert (e.culprit_pass, e.culprit_verified) == ("reorder_for_locality", True)
    assert "`k_pool` (layer0.k)" in e.reason and "`reorder_for_locality` moved that read below the write" in e.reason
    assert "CompilationConfig(inductor_compile_config={'reorder_for_locality': False})" in e.fix
    assert "torch.compile(fn, options={'reorder_for_locality': False})" in e.fix


@pytest.mark.parametrize(
    ("cause", "culprit", "needle"),
    [
        ("shared_storage", None, "allocate K and V as separate tensors"),
        ("read_after_write", None, "commit before the window gather"),
        ("read_after_write", "my_reorder_pass", "disabled_passes = 'my_reorder_pass'"),
        ("view_not_written_back", None, "as a whole tensor"),
        ("output_alias", None, "do not return the pool"),
        ("chained_writes", None, "torch.stack([k, v])"),
        ("other", None, "report it with the graphs"),
    ],
)
def test_fix_text_per_cause(cause: str, culprit: str | None, needle: str) -> None:
    assert needle in fix_for(cause, culprit)
    assert set(FIXES) == set(CAUSES)
