"""Graph analysis on hand-built FX graphs (no torch.compile): the detector itself."""

from __future__ import annotations

import torch
import torch.fx

import ar_paging  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
from compile_checks.check.attribution import match_pool
from compile_checks.check.graph.copies import find_clone_sites
from compile_checks.check.graph.functionalized import functionalized_calls
from compile_checks.check.graph.fx_helpers import layer_of, mutated_arg_names, node_line
from compile_checks.check.graph.geometry import StorageRef, TensorGeometry

N, H, D = 64, 2, 8
aten = torch.ops.aten


@torch.library.custom_op("cc_test::scale_into", mutates_args=("buf",))
def scale_into(buf: torch.Tensor, src: torch.Tensor, alpha: float) -> None:
    """A second mutating custom op, to show the detector reads any op's schema."""
    buf.copy_(src * alpha)


def _meta(
    shape: tuple[int, ...], stride: tuple[int, ...] | None = None, offset: int = 0, base_numel: int | None = None
) -> torch.Tensor:
    base = torch.empty(base_numel if base_numel is not None else max(1, sum(shape)) * 4096, device="meta")
    if stride is None:
        stride = torch.empty(shape, device="meta").stride()
    return base.as_strided(shape, stride, offset)


def _node(g: torch.fx.Graph, target: object, args: tuple, val: torch.Tensor | None) -> torch.fx.Node:
    n = g.call_function(target, args)
    if val is not None:
        n.meta["val"] = val
    return n


def _inputs(g: torch.fx.Graph, fused: bool) -> dict[str, torch.fx.Node]:
    """Placeholders k_pool, v_pool, new_k, new_v, slots with meta vals (fused: views of one storage)."""
    pool_shape, pool_stride = (N, H, D), (H * D, D, 1)
    names = {}
    for name in ("k_pool", "v_pool", "new_k", "new_v", "slots"):
        names[name] = g.placeholder(name)
    if fused:
        names["k_pool"].meta["val"] = _meta(pool_shape, pool_stride, 0, base_numel=2 * N * H * D)
        names["v_pool"].meta["val"] = _meta(pool_shape, pool_stride, N * H * D, base_numel=2 * N * H * D)
    else:
        names["k_pool"].meta["val"] = torch.empty(pool_shape, device="meta")
        names["v_pool"].meta["val"] = torch.empty(pool_shape, device="meta")
    names["new_k"].meta["val"] = torch.empty((4, H, D), device="meta")
    names["new_v"].meta["val"] = torch.empty((4, H, D), device="meta")
    names["slots"].meta["val"] = torch.empty((4,), dtype=torch.long, device="meta")
    return names


def fused_post_decomposition_graph(with_clone: bool = True) -> torch.fx.Graph:
    """The final post-grad pattern Inductor leaves for K, V = kv[0], kv[1] (v2)."""
    g = torch.fx.Graph()
    p = _inputs(g, fused=True)
    total = 2 * N * H * D
    v_arg: torch.fx.Node = p["v_pool"]
    if with_clone:
        whole = _node(g, aten.as_strided.default, (p["v_pool"], [total], [1], 0), _meta((total,), (1,), 0, total))
        clone = _node(g, aten.clone.default, (whole,), torch.empty((total,), device="meta"))
        v_arg = _node(
            g,
            aten.as_strided.default,
            (clone, [N, H, D], [H * D, D, 1], N * H * D),
            _meta((N, H, D), (H * D, D, 1), N * H * D, total),
        )
    _node(g, torch.ops.ar_paging.paged_write.default, (p["k_pool"], v_arg, p["new_k"], p["new_v"], p["slots"]), None)
    if with_clone:
        _node(g, aten.copy_.default, (p["v_pool"], v_arg), p["v_pool"].meta["val"])
    g.output(None)
    return g


def test_schema_mutated_args_are_read_from_the_op() -> None:
    assert mutated_arg_names(torch.ops.ar_paging.paged_write.default) == ["k_pool", "v_pool"]
    assert mutated_arg_names(torch.ops.cc_test.scale_into.default) == ["buf"]
    assert mutated_arg_names(aten.add.Tensor) == []


def test_fused_clone_is_reported_with_arg_and_whole_storage_bytes() -> None:
    sites = find_clone_sites(fused_post_decomposition_graph(with_clone=True))
    assert len(sites) == 1
    site = sites[0]
    assert (site.op, site.arg, site.placeholder, site.placeholder_index) == (
        "ar_paging::paged_write",
        "v_pool",
        "v_pool",
        1,
    )
    assert site.clone.nbytes == 2 * N * H * D * 4  # the whole (2, N, H, D) fp32 storage
    assert site.view is not None and site.view.storage_offset == N * H * D
    assert site.clone_source_offset == 0 and site.clones_whole_input and not site.clone_is_input


def test_no_clone_no_report() -> None:
    assert find_clone_sites(fused_post_decomposition_graph(with_clone=False)) == []


def test_clone_of_non_mutated_argument_is_not_reported() -> None:
    g = torch.fx.Graph()
    p = _inputs(g, fused=False)
    cloned_k = _node(g, aten.clone.default, (p["new_k"],), p["new_k"].meta["val"])
    _node(
        g, torch.ops.ar_paging.paged_write.default, (p["k_pool"], p["v_pool"], cloned_k, p["new_v"], p["slots"]), None
    )
    g.output(None)
    assert find_clone_sites(g) == []


def test_clone_of_an_intermediate_is_not_reported() -> None:
    """A mutated buffer cloned from a computed tensor is no copy of a caller's pool."""
    g = torch.fx.Graph()
    p = _inputs(g, fused=False)
    doubled = _node(g, aten.mul.Tensor, (p["k_pool"], 2), p["k_pool"].meta["val"])
    cloned = _node(g, aten.clone.default, (doubled,), p["k_pool"].meta["val"])
    _node(g, torch.ops.ar_paging.paged_write.default, (cloned, p["v_pool"], p["new_k"], p["new_v"], p["slots"]), None)
    g.output(None)
    assert find_clone_sites(g) == []


def _user_clone_graph(write_back: bool) -> torch.fx.Graph:
    g = torch.fx.Graph()
    p = _inputs(g, fused=False)
    user_clone = _node(g, aten.clone.default, (p["k_pool"],), p["k_pool"].meta["val"])
    _node(
        g, torch.ops.ar_paging.paged_write.default, (user_clone, p["v_pool"], p["new_k"], p["new_v"], p["slots"]), None
    )
    if write_back:
        _node(g, aten.copy_.default, (p["k_pool"], user_clone), p["k_pool"].meta["val"])
    g.output(None)
    return g


def test_clone_of_an_input_the_program_never_mutates_is_the_users_own() -> None:
    """``tmp = k.clone(); op(tmp)``: no copy_ write-back to k, so k is not mutated: not reported."""
    assert find_clone_sites(_user_clone_graph(write_back=False)) == []


def test_clone_that_existed_before_reinplacing_is_not_reported() -> None:
    g = _user_clone_graph(write_back=True)
    # with a write-back and no snapshot it is a functionalization clone of k_pool ...
    assert [s.arg for s in find_clone_sites(g)] == ["k_pool"]
    # ... with the snapshot (what the backend passes: nodes present before reinplacing) it is not
    assert find_clone_sites(g, preexisting=set(g.nodes)) == []


def test_any_mutating_custom_op_is_checked() -> None:
    g = torch.fx.Graph()
    buf = g.placeholder("buf")
    src = g.placeholder("src")
    buf.meta["val"] = torch.empty((16, 4), device="meta")
    src.meta["val"] = torch.empty((16, 4), device="meta")
    c = _node(g, aten.clone.default, (buf,), torch.empty((16, 4), device="meta"))
    _node(g, torch.ops.cc_test.scale_into.default, (c, src, 2.0), None)
    _node(g, aten.copy_.default, (buf, c), buf.meta["val"])
    g.output(None)
    sites = find_clone_sites(g)
    assert [(s.op, s.arg, s.clone.nbytes, s.clone_is_input) for s in sites] == [
        ("cc_test::scale_into", "buf", 16 * 4 * 4, True)
    ]


def test_functionalized_calls_reads_the_reinplace_decision_v2_and_v1() -> None:
    g = torch.fx.Graph()
    p = _inputs(g, fused=True)
    v2 = g.call_function(
        torch.ops.higher_order.auto_functionalized_v2,
        (torch.ops.ar_paging.paged_write.default,),
        {
            "new_k": p["new_k"],
            "new_v": p["new_v"],
            "slot_mapping": p["slots"],
            "_k_pool_base_index": 0,
            "_v_pool_base_index": 1,
            "_all_bases": [p["k_pool"], p["v_pool"]],
        },
    )
    v2.meta["only_clone_these_tensors"] = [1]
    v1 = g.call_function(
        torch.ops.higher_order.auto_functionalized,
        (torch.ops.ar_paging.paged_write.default,),
        {
            "k_pool": p["k_pool"],
            "v_pool": p["v_pool"],
            "new_k": p["new_k"],
            "new_v": p["new_v"],
            "slot_mapping": p["slots"],
        },
    )
    v1.meta["only_clone_these_tensors"] = ["k_pool"]
    g.output(None)
    got = [(f.version, f.arg, f.cloned, f.placeholder_index) for f in functionalized_calls(g)]
    assert got == [
        ("v2", "k_pool", False, 0),
        ("v2", "v_pool", True, 1),
        ("v1", "k_pool", True, 0),
        ("v1", "v_pool", False, 1),
    ]
    # the v_pool record knows its view sits in the second half of the shared storage
    v_rec = next(f for f in functionalized_calls(g) if f.version == "v2" and f.arg == "v_pool")
    assert v_rec.view is not None and v_rec.view.storage_offset == N * H * D


def test_match_pool_tells_kv0_from_kv1_by_offset() -> None:
    kv = torch.zeros(2, N, H, D)
    pools = {"layer0.k": kv[0], "layer0.v": kv[1], "layer1.k": torch.zeros(N, H, D)}
    ph = StorageRef.of(kv[1])
    v_view = StorageRef(ph.data_ptr, N * H * D, (N, H, D), (H * D, D, 1), torch.float32)
    assert match_pool(v_view, ph, pools) == "layer0.v"
    k_view = StorageRef(ph.data_ptr, 0, (N, H, D), (H * D, D, 1), torch.float32)
    assert match_pool(k_view, ph, pools) == "layer0.k"
    other = torch.zeros(N, H, D)
    assert match_pool(StorageRef.of(other), StorageRef.of(other), pools) is None


def test_geometry_span_and_helpers() -> None:
    geo = TensorGeometry((N, H, D), (H * D, D, 1), N * H * D, torch.float16)
    assert geo.nbytes == N * H * D * 2
    assert geo.element_span() == (N * H * D, 2 * N * H * D)
    assert layer_of("layer3.v") == 3 and layer_of("layers.12.k") == 12 and layer_of("cache") is None
    src = 'def forward(self):\n    x = 1\n    clone_default: "f32[4]" = torch.ops.aten.clone.default(x)\n'
    assert node_line(src, "clone_default") == 3
    assert node_line(src, "clone") is None
