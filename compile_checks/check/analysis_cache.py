"""Identical compiled regions analysed once: what the check reads from a post-grad graph, cached by its structure.

An engine compiled per block (vLLM-Omni's DreamZero, ``examples/wan14b_meta``) compiles one code object once
per block: 40 identical blocks are 40 dynamo graphs, 40 AOT graphs and 40 runs of Inductor's post-grad passes
(the floor: plain ``torch.compile`` pays them too), and 40 identical post-grad graphs. What the check reads
from a post-grad graph (its copy sites, misplaced write-backs, notes, output ops, symbol binders, inputs'
geometry, blind spots) depends on that graph alone, so it is computed once per distinct graph
(:class:`AnalysisCache`, one per check session) and reused for every graph equal to it.

Attribution stays per block: the analysis names graph inputs (placeholder positions), never pools; each
block's calls attribute its own runtime inputs to the pools they are
(:mod:`compile_checks.check.runtime_pools`), so each block's copies carry its own pools' names and bytes.

The key (:func:`graph_key`): the post-grad graph's code (every node, op and argument), which of its nodes were
traced (a copy a pass added is not the program's own), the geometry of every graph input and constant
(shape, stride, storage offset, dtype, device, symbolic expressions) and which of them share a storage. Any
difference is a new entry: a block whose graph differs (a copy planted in one block) is analysed on its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from compile_checks.check.graph.aten_writes import whole_pool_passes
from compile_checks.check.graph.blind_spots import subgraph_mutations
from compile_checks.check.graph.copies import find_copy_sites, misplaced_write_backs
from compile_checks.check.graph.geometry import SymbolBinder, TensorGeometry, geometry_of, symbol_binders
from compile_checks.check.graph.own_copies import programs_own_copies
from compile_checks.check.graph.sites import CloneSite
from compile_checks.check.pool_identity import output_ops
from compile_checks.check.storage_identity import storage_key
from compile_checks.vocab import BlindSpot


@dataclass(frozen=True)
class PostGradAnalysis:
    """What the check reads from one post-grad graph (tuples: an entry is shared by every graph equal to it)."""

    clone_sites: tuple[CloneSite, ...]
    misplaced: tuple[str, ...]
    notes: tuple[str, ...]
    output_ops: tuple[str, ...]
    binders: tuple[SymbolBinder, ...]
    inputs: tuple[TensorGeometry | None, ...]
    blind_spots: tuple[tuple[BlindSpot, str], ...]


def analyse(gm: torch.fx.GraphModule, traced: Collection[torch.fx.Node]) -> PostGradAnalysis:
    """The analysis of the final post-grad graph ``gm``; ``traced``: its nodes that dynamo + AOT traced."""
    graph = gm.graph
    sites = find_copy_sites(graph, traced)
    clones = {c.clone_node for c in sites}
    return PostGradAnalysis(
        clone_sites=tuple(sites),
        misplaced=tuple(misplaced_write_backs(graph)),
        notes=tuple(whole_pool_passes(graph, clones) + programs_own_copies(graph)),
        output_ops=tuple(output_ops(graph)),
        binders=tuple(symbol_binders(graph)),
        inputs=tuple(geometry_of(n.meta.get("val")) for n in graph.nodes if n.op == "placeholder"),
        blind_spots=tuple((BlindSpot.HOP_SUBGRAPH, m) for m in subgraph_mutations(gm)),
    )


def _tensor_facts(value: Any, storages: dict[tuple[str, int], int]) -> str:
    """A graph input's or constant's geometry and the storage it shares with earlier ones (by position)."""
    if not isinstance(value, torch.Tensor):
        return repr(type(value).__name__) if not isinstance(value, (int, float, bool, torch.SymInt)) else str(value)
    try:
        where = (str(value.device), storage_key(value))
        shared = storages.setdefault(where, len(storages))
        offset = value.storage_offset()
    except (RuntimeError, NotImplementedError):  # no storage to speak of (a sparse or nested tensor)
        shared, offset = -1, -1
    return f"{tuple(value.shape)}|{value.stride()}|{offset}|{value.dtype}|{value.device}|s{shared}"


def graph_key(gm: torch.fx.GraphModule, traced: Collection[torch.fx.Node]) -> str:
    """What the analysis of ``gm`` depends on, as a digest (see the module docstring)."""
    digest = hashlib.sha256(gm.code.encode())
    digest.update("".join("t" if n in traced else "p" for n in gm.graph.nodes).encode())
    storages: dict[tuple[str, int], int] = {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            digest.update(f"{node.op}:{node.name}:{_tensor_facts(node.meta.get('val'), storages)};".encode())
            if node.op == "get_attr":  # a constant's own geometry (its value node.meta may not carry)
                const = getattr(gm, str(node.target), None)
                digest.update(_tensor_facts(const, storages).encode())
    return digest.hexdigest()


@dataclass
class AnalysisCache:
    """One per check session: each distinct post-grad graph analysed once; ``hits`` counts the reuses."""

    entries: dict[str, PostGradAnalysis] = field(default_factory=dict)
    hits: int = 0

    def analysed(self, gm: torch.fx.GraphModule, traced: Collection[torch.fx.Node]) -> PostGradAnalysis:
        key = graph_key(gm, traced)
        found = self.entries.get(key)
        if found is not None:
            self.hits += 1
            return found
        found = self.entries[key] = analyse(gm, traced)
        return found


__all__ = ["AnalysisCache", "PostGradAnalysis", "analyse", "graph_key"]
