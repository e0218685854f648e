"""What the analysis cannot see into, so a region holding it is never called clean.

The copy-site analysis reads the top-level post-grad graph. A mutating op inside a
higher-order-op subgraph (``invoke_subgraph``, ``cond``, ``while_loop``, a wrapped
checkpoint region ...) lives in a child ``GraphModule`` whose clones and write-backs
follow that HOP's own conventions: :func:`subgraph_mutations` lists them so the report
marks the region as not analysed instead of skipping them.
"""

from __future__ import annotations

import torch
import torch.fx

from compile_checks.check.graph.functionalized import AUTO_FUNCTIONALIZED_TARGETS
from compile_checks.check.graph.fx_helpers import mutated_arg_names, op_name


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


__all__ = ["subgraph_mutations"]
