"""Issue 16 item 2: a clone added by a post-grad pass is never "the program's own copy".

vLLM's pass manager (``post_grad_custom_pre_pass`` / ``post_grad_custom_post_pass``) and Inductor's
own passes run inside ``post_grad_passes``. The check used to snapshot the graph at the reinplace
pass, so a clone a pre-pass inserted was counted as one the program asked for (false clean). The
snapshot is now the graph as traced, when ``post_grad_passes`` starts. Driven through the probe's
own wrapper with a pass that inserts ``clone -> index_put_ -> copy_ back`` (what the generated
code then runs: a pool-sized buffer copied in and back), next to the same nodes traced by the
program (its own copy).
"""

from __future__ import annotations

import torch
import torch.fx

from compile_checks.check.backend import InnerGraph, Probe

aten = torch.ops.aten


def _graph(with_copy: bool) -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    k, idx, x = g.placeholder("k"), g.placeholder("idx"), g.placeholder("x")
    k.meta["val"] = torch.empty(64, 16)
    idx.meta["val"] = torch.empty(4, dtype=torch.long)
    x.meta["val"] = torch.empty(4, 16)
    if with_copy:
        _add_copy(g, k, idx, x)
    g.output(None)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _add_copy(g: torch.fx.Graph, k: torch.fx.Node, idx: torch.fx.Node, x: torch.fx.Node) -> None:
    clone = g.call_function(aten.clone.default, (k,))
    clone.meta["val"] = torch.empty(64, 16)
    g.call_function(aten.index_put_.default, (clone, [idx], x)).meta["val"] = clone.meta["val"]
    g.call_function(aten.copy_.default, (k, clone)).meta["val"] = k.meta["val"]


def _user_pass(gm: torch.fx.GraphModule, is_inference: bool) -> None:
    """Stands in for ``post_grad_passes`` running a user's pass that adds the copy."""
    g = gm.graph
    k, idx, x = (n for n in g.nodes if n.op == "placeholder")
    with g.inserting_before(next(n for n in g.nodes if n.op == "output")):
        _add_copy(g, k, idx, x)


def _sites(gm: torch.fx.GraphModule, passes) -> list[tuple[str, str]]:
    probe = Probe()
    inner = InnerGraph()
    probe._current_inner, probe._current_gm = inner, gm
    probe.wrap_post_grad(passes)(gm, True)
    return [(s.op, s.placeholder) for s in inner.clone_sites]


def test_a_clone_added_by_a_pass_is_a_pool_copy() -> None:
    assert _sites(_graph(with_copy=False), _user_pass) == [("aten::index_put_", "k")]


def test_the_same_clone_traced_from_the_program_is_its_own() -> None:
    assert _sites(_graph(with_copy=True), lambda gm, is_inference: None) == []
