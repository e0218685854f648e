"""What the analysis cannot see into, so a region holding it is never called clean, and how to avoid it.

The copy-site analysis reads the top-level post-grad graph. A mutating op inside a
higher-order-op subgraph (``invoke_subgraph``, ``cond``, ``while_loop``, a wrapped
checkpoint region ...) lives in a child ``GraphModule`` whose clones and write-backs
follow that HOP's own conventions: :func:`subgraph_mutations` lists them so the report
marks the region as not analysed instead of skipping them. :func:`blind_spot` words every
blind spot the same way: where, what, and what the user can do about it.

A graph Inductor does not lower is no blind spot: ``compile_fx_inner`` returns the forward of
a graph with no call node (placeholders and an output: what a graph break leaves when the
region only returns its inputs, ``x.type_as(v); return``) without running
the post-grad passes, and such a graph can neither copy nor write (``InnerGraph.nothing_to_lower``).
"""

from __future__ import annotations

import torch
import torch.fx

from compile_checks.check.graph.functionalized import AUTO_FUNCTIONALIZED_TARGETS
from compile_checks.check.graph.fx_helpers import mutated_arg_names, op_name
from compile_checks.vocab import BlindSpot

WHAT: dict[BlindSpot, str] = {
    BlindSpot.NO_INNER_GRAPH: "Inductor compiled no graph through the check's inner compile",
    BlindSpot.NO_POST_GRAD: (
        "no post-grad graph was observed for a graph Inductor lowers (the check's Inductor hook did not fire: "
        "a cache hit or a compile path that bypasses post_grad_passes)"
    ),
    BlindSpot.BACKWARD: "backward graph: copies made in a backward pass are not analysed",
    BlindSpot.HOP_SUBGRAPH: "",  # the detail names the ops and the subgraph
    BlindSpot.NO_CALLABLE: "compiled graph exposes no current_callable: its inputs cannot be attributed",
}

AVOID: dict[BlindSpot, str] = {
    BlindSpot.NO_INNER_GRAPH: "compile through the check's backend (`Case.compile` receives it) with Inductor",
    BlindSpot.NO_POST_GRAD: (
        "keep caches off and compile through the check's backend (`Case.compile`), not a precompiled or AOT artifact"
    ),
    BlindSpot.BACKWARD: (
        "an input or parameter requires grad, so AOT autograd compiled a backward: run the check under "
        "`torch.inference_mode()` (or `torch.no_grad()`), or freeze the parameters with "
        "`model.requires_grad_(False)`"
    ),
    BlindSpot.HOP_SUBGRAPH: (
        "move the mutating op out of the higher-order op (nested_compile_region, torch.cond, checkpoint)"
    ),
    BlindSpot.NO_CALLABLE: "compile with the stock Inductor backend through the check",
}


def blind_spot(kind: BlindSpot, where: str, detail: str = "") -> str:
    """``where: what (avoid: how)``: one line of ``CloneReport.unanalysed``."""
    what = detail or WHAT[kind]
    return f"{where}: {what} (to avoid: {AVOID[kind]})"


def _is_mutating(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target in AUTO_FUNCTIONALIZED_TARGETS:
        return True
    if mutated_arg_names(node.target):
        return True
    from compile_checks.check.graph.aten_writes import is_functional_write

    return is_functional_write(node)


def subgraph_mutations(gm: torch.fx.GraphModule) -> list[str]:
    """One line per mutating op found inside a child graph module of ``gm`` (any depth)."""
    out: list[str] = []
    for name, sub in gm.named_modules():
        if not name or not isinstance(sub, torch.fx.GraphModule):
            continue
        ops = sorted(
            {
                op_name(n.args[0] if n.target in AUTO_FUNCTIONALIZED_TARGETS else n.target)
                for n in sub.graph.nodes
                if _is_mutating(n)
            }
        )
        if ops:
            out.append(f"mutating op(s) {', '.join(ops)} inside higher-order-op subgraph {name!r} are not analysed")
    return out


__all__ = ["AVOID", "WHAT", "blind_spot", "subgraph_mutations"]
