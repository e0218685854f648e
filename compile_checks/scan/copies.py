"""The surviving copies of one logged graph, each explained.

The copies are the live check's: :func:`compile_checks.check.graph.copies.find_copy_sites` runs on
the rebuilt post-grad graph (functionalization clones written back by the ``copy_`` epilogue, and
functional ATen writes copied in and back). Each copy is explained as the gate explains it
(:func:`compile_checks.explain.explanations.explain_clone` on the record :mod:`.replay` rebuilds from
AOT's logged graph): one copy, one cause, whichever command finds it. Without AOT's graph (a debug
folder, a depyf dump) the explanation says what the post-grad graph shows (inputs in one storage, a
read of the input after the write, the source line of the write) and "the graph alone does not say"
otherwise. The output code, when logged, is read (``ast``) for the copy's buffer allocation as
confirmation. A graph a cache served for other input aliasing gets a ``cache_aliasing`` finding.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from compile_checks.check.findings import SurvivingClone
from compile_checks.check.graph.copies import find_copy_sites, written_back_values
from compile_checks.check.graph.fx_helpers import flatten_nodes, node_line, op_name, view_chain_root, write_backs
from compile_checks.check.graph.generated_buffers import settle_inductors_choices, upper_bound_note
from compile_checks.check.graph.sites import CloneSite, is_view_scatter
from compile_checks.explain.culprit_pass import GraphRecord
from compile_checks.explain.explanations import FIXES, explain_clone
from compile_checks.explain.user_source import short_path, user_frames
from compile_checks.scan.artifacts import GraphArtifacts
from compile_checks.scan.cache_origin import CACHE_FIX, alias_finding, alias_mismatches
from compile_checks.scan.fx_text import GraphTextError, UnknownOp, parse_graph, symbolic_nbytes
from compile_checks.scan.inputs import PoolMap, describe_input, storage_sharers
from compile_checks.scan.replay import trace_record
from compile_checks.vocab import Cause, CopyKind

_COPY = torch.ops.aten.copy_.default
_CLONE = torch.ops.aten.clone.default


@dataclass
class GraphScan:
    """One graph's verdict material: copies (``verdict.copy_fields`` keys and more), problems, notes."""

    graph: GraphArtifacts
    copies: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the scan could not decide (fails the graph)
    findings: list[str] = field(default_factory=list)  # ``kind: message``: what fails the graph besides copies
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # nothing to decide from (no post-grad graph, unreadable graph)
    seconds: float = 0.0


def _aliases(graph: torch.fx.Graph, placeholder: torch.fx.Node) -> set[torch.fx.Node]:
    return {n for n in graph.nodes if view_chain_root(n)[0] is placeholder}


def _writer(graph: torch.fx.Graph, site: CloneSite, copy_node: torch.fx.Node) -> torch.fx.Node:
    """The op the copy stands in for: the mutating op fed by the clone, or the ATen write itself."""
    if site.kind == CopyKind.ATEN_WRITE_COPY:
        return copy_node
    for node in graph.nodes:
        if (
            node.op == "call_function"
            and op_name(node.target) == site.op
            and any(view_chain_root(a)[0] is copy_node for a in flatten_nodes([*node.args, *node.kwargs.values()]))
        ):
            return node
    return copy_node


def _write_back_chains(graph: torch.fx.Graph) -> tuple[set[torch.fx.Node], set[torch.fx.Node]]:
    """(every node of a ``copy_`` epilogue's value chain, the buffers written back through view scatters).

    auto_functionalized v1 writes a mutated view of an input back as
    ``copy_(kv, select_scatter(kv, clone, 0, 0))``: the scatter reads the input, but it is the
    write-back, not a later read; and a clone written back that way is v1's copy of a view.
    """
    chain: set[torch.fx.Node] = set()
    scattered: set[torch.fx.Node] = set()
    for _copy, _placeholder, src in write_backs(graph):
        pairs = written_back_values(src)
        if len(pairs) > 1:
            scattered.update(buffer for buffer, _ in pairs[:-1])
        cur, views = view_chain_root(src)
        chain.update(views)
        while is_view_scatter(cur):
            chain.add(cur)
            cur, views = view_chain_root(cur.args[0])  # type: ignore[arg-type]
            chain.update(views)
    return chain, scattered


def _later_read(graph: torch.fx.Graph, placeholder: torch.fx.Node, writer: torch.fx.Node) -> torch.fx.Node | None:
    """The first node after ``writer`` that reads the input (through a view), not its write-back."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    aliases = _aliases(graph, placeholder)
    write_back, _ = _write_back_chains(graph)
    for node in graph.nodes:
        if order[node] <= order[writer] or node in aliases or node in write_back or node.op != "call_function":
            continue
        if node.target is _COPY and node.args and node.args[0] in aliases:
            continue  # the epilogue writing the input back
        if any(a in aliases for a in flatten_nodes([*node.args, *node.kwargs.values()])):
            return node
    return None


def _where(node: torch.fx.Node) -> str | None:
    """The logged source line of ``node``, unless it is PyTorch's own (a ``TorchFunctionMode`` frame, say)."""
    frames = [f for f in user_frames(node) if "site-packages/torch/" not in f.file.replace("\\", "/")]
    return f"{short_path(frames[0].file)}:{frames[0].line}" if frames else None


def _explain(
    art: GraphArtifacts,
    graph: torch.fx.Graph,
    site: CloneSite,
    copy_node: torch.fx.Node,
    nbytes: object,
    record: GraphRecord | None = None,
    region: int = 0,
) -> str:
    """The copy's explanation: the live check's own (:func:`~compile_checks.explain.explanations.explain_clone`
    on the record :func:`~compile_checks.scan.replay.trace_record` rebuilt from AOT's logged graph); without
    AOT's graph (a debug folder, a depyf dump), what the post-grad graph alone shows."""
    mismatch = alias_mismatches(art) if art.served_from else []
    if mismatch and (storage_sharers(art, site.placeholder) or site.clones_whole_input):
        # the copy is the layout the served artifact was compiled for (the graph's cache_aliasing finding),
        # not this run's: the graph this run logged does not hold it
        name = describe_input(art, site.placeholder)
        return (
            f"{Cause.SHARED_STORAGE}: the graph was served from a compile cache and {mismatch[0]}: the clone of "
            f"`{name}` ({nbytes} bytes) is that compile's, not this run's layout; fix: {CACHE_FIX}"
        )
    if record is not None:
        clone = SurvivingClone(
            op=site.op,
            arg=site.arg,
            nbytes=nbytes,  # type: ignore[arg-type]  # symbolic: the expression, as the scan reports it
            shape=tuple(site.clone.shape),
            dtype=site.clone.dtype,
            region=region,
            node=site.clone_node,
            kind=site.kind,
        )
        return explain_clone(clone, [record]).summary()
    return _explain_from_post_grad(art, graph, site, copy_node, nbytes)


def _explain_from_post_grad(
    art: GraphArtifacts, graph: torch.fx.Graph, site: CloneSite, copy_node: torch.fx.Node, nbytes: object
) -> str:
    placeholder = next(n for n in graph.nodes if n.op == "placeholder" and n.name == site.placeholder)
    writer = _writer(graph, site, copy_node)
    name = describe_input(art, site.placeholder)
    sharers = storage_sharers(art, site.placeholder)
    reader = _later_read(graph, placeholder, writer)
    if sharers:
        cause, detail = (
            Cause.SHARED_STORAGE,
            (
                f"`{name}` shares one storage with {', '.join(f'`{s}`' for s in sharers)} (one allocation, as Dynamo "
                f"saw the inputs); Inductor must clone the shared storage ({nbytes} bytes)"
            ),
        )
    elif site.clones_whole_input:
        cause, detail = (
            Cause.SHARED_STORAGE,
            (f"the clone copies more than `{name}`: the whole storage it is a view of ({nbytes} bytes)"),
        )
    elif copy_node in _write_back_chains(graph)[1]:
        cause, detail = (
            Cause.VIEW_OF_INPUT_V1,
            (
                f"the op writes a view of `{name}`, and the graph writes the clone back into it with a view scatter: "
                "auto_functionalized v1's form, under which Inductor clones a view of a graph input instead of "
                "writing it in place"
            ),
        )
    elif reader is not None:
        at = _where(reader)
        cause, detail = (
            Cause.READ_AFTER_WRITE,
            (
                f"`{name}` is read after the write, by {reader.name} ({op_name(reader.target)}"
                f"{' at ' + at if at else ''}): the write cannot happen in place"
            ),
        )
    else:
        cause, detail = (
            Cause.OTHER,
            (
                "the post-grad graph alone does not say why (no shared storage logged, no later read); "
                "run the live check (compile-checks gate) on a case that reproduces it"
            ),
        )
    at = _where(writer)
    written = f"; written at {at}" if at else ""
    return f"{cause}: {detail}{written}; fix: {FIXES[cause]}"


def _allocations(output_code: str) -> set[tuple[int, ...]]:
    """Shapes of every ``empty_strided*(shape, stride, ...)`` allocation in the wrapper code."""
    shapes: set[tuple[int, ...]] = set()
    for node in ast.walk(ast.parse(output_code)):
        if isinstance(node, ast.Call) and "empty_strided" in ast.unparse(node.func) and node.args:
            try:
                shape = ast.literal_eval(node.args[0])
            except ValueError:
                continue
            if isinstance(shape, tuple) and all(isinstance(s, int) for s in shape):
                shapes.add(shape)
    return shapes


def _nothing_to_lower(aot_graph: str | None) -> bool:
    """Whether AOT's logged graph has no call node (False when absent or unreadable: never assumed)."""
    if aot_graph is None:
        return False
    try:
        graph = parse_graph(aot_graph).graph
    except GraphTextError:
        return False
    return not any(n.op.startswith("call") for n in graph.nodes)


def _unknown_op_problems(graph: torch.fx.Graph) -> list[str]:
    """An unregistered op handed a clone of an input: whether it writes it (a copy) is unknowable."""
    out: list[str] = []
    for node in graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, UnknownOp):
            continue
        for a in flatten_nodes([*node.args, *node.kwargs.values()]):
            root = view_chain_root(a)[0]
            source = root.args[0] if root.target is _CLONE and root.args else None
            if isinstance(source, torch.fx.Node) and view_chain_root(source)[0].op == "placeholder":
                out.append(
                    f"{node.name}: {node.target} is not registered in this process, so which arguments it writes "
                    f"is unknown, and it is passed {root.name} (a clone of an input): import the module that "
                    "defines it (compile-checks scan --import MODULE)"
                )
                break
    return out


def _unsized_write_backs(graph: torch.fx.Graph) -> list[str]:
    """Values written back into an input whose size the text did not give: a copy there cannot be sized."""
    return [
        f"{copy_node.name}: the value written back into {placeholder.name} ({view_chain_root(src)[0].name}) has "
        "no readable size annotation, so whether it is a copy of the input cannot be decided"
        for copy_node, placeholder, src in write_backs(graph)
        if "val" not in view_chain_root(src)[0].meta
    ]


def scan_graph(art: GraphArtifacts, pools: PoolMap, region: int) -> GraphScan:
    """The copies of one logged graph (``region``: its position in the scan, as the live ``region``)."""
    t0 = time.perf_counter()
    out = GraphScan(art, notes=list(art.notes))
    aliasing = alias_finding(art)
    if aliasing is not None:
        out.findings.append(aliasing)
    if art.compile_failure is not None:
        out.error = (
            f"{art.label} ({art.origin}): the compile failed ({art.compile_failure}): "
            "its graph never ran compiled, no verdict"
        )
        return out
    if art.post_grad is None and _nothing_to_lower(art.aot_graph):
        # Inductor's own no-op rule (compile_fx_inner: no call node): it runs no pass and logs no post-grad
        # graph for a graph that returns its inputs (``x.type_as(v)`` of equal dtypes); nothing to copy
        out.notes.append(f"{art.label}: AOT's graph has no call (Inductor lowers nothing): nothing to copy")
        return out
    if art.post_grad is None:
        out.error = (
            f"{art.label} ({art.origin}): the trace has no post-grad graph for this compile (an analysis-only or "
            "failed compile, or one loaded from a cache that logs none, such as vLLM's: trace with "
            "VLLM_DISABLE_COMPILE_CACHE=1): no verdict"
        )
        return out
    try:
        parsed = parse_graph(art.post_grad)
    except GraphTextError as e:
        out.error = f"{art.label} ({art.origin}): {e}"
        return out
    graph = parsed.graph
    out.problems += _unknown_op_problems(graph)
    nodes = {n.name: n for n in graph.nodes}
    placeholders = [n.name for n in graph.nodes if n.op == "placeholder"]
    allocated = _allocations(art.output_code) if art.output_code else None
    if allocated is None:
        out.notes.append("no output code logged: the verdict is the post-grad graph's alone")
    sites = find_copy_sites(graph)
    storages = {n: (i.storage, i.storage_offset) for n, i in art.inputs.items() if i.storage is not None}
    record = trace_record(art.aot_graph, graph, region, storages) if sites else None
    if art.output_code:  # as the live check's full compile: the code settles Inductor's buffer choices
        sites, settled = settle_inductors_choices(sites, art.output_code)
        out.notes += settled
    else:
        out.notes += [upper_bound_note(s) for s in sites if s.buffer_is_inductors_choice]
    for site in sites:
        copy_node = nodes[site.clone_node]
        symbolic = symbolic_nbytes(copy_node.meta.get("val"))
        nbytes: int | str = symbolic if symbolic is not None else site.clone.nbytes
        written = sum(g.nbytes for g in site.written) if not any(g.is_symbolic for g in site.written) else 0
        if allocated is not None and symbolic is None and site.clone.shape not in allocated:
            out.notes.append(
                f"{site.clone_node}: no buffer of shape {list(site.clone.shape)} is allocated in the output code "
                "(Inductor may have reused or fused one)"
            )
        position = placeholders.index(site.placeholder)
        line = node_line(art.post_grad, site.clone_node)
        out.copies.append(
            {
                "op": site.op,
                "arg": site.arg,
                "pool": pools.pool_of(site.placeholder, position, art.inputs.get(site.placeholder)),
                "input": describe_input(art, site.placeholder),
                "input_position": position,
                "nbytes": nbytes,
                "kind": site.kind,
                "written_bytes": written,
                "where": f"{art.label} input {describe_input(art, site.placeholder)}"
                + (f" (post-grad graph line {line})" if line else ""),
                "explanation": _explain(art, graph, site, copy_node, nbytes, record, region),
                "shape": [str(s) for s in copy_node.meta["val"].shape] if symbolic else list(site.clone.shape),
                "dtype": str(site.clone.dtype).removeprefix("torch."),
                "region": region,
                "node": site.clone_node,
                "graph": art.label,
                "rank": art.rank,
                "compile_id": art.compile_id,
            }
        )
    out.problems += _unsized_write_backs(graph)
    if parsed.contiguous_assumed:
        out.notes.append("the graph text prints no strides: every value is taken as contiguous")
    if parsed.symbols:
        out.notes.append(
            f"symbolic sizes ({', '.join(sorted(parsed.symbols))}): bytes are expressions of them; "
            "their values at run time are not in the graph"
        )
    out.seconds = time.perf_counter() - t0
    return out


__all__ = ["GraphScan", "scan_graph"]
