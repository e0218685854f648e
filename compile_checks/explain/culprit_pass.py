"""Which post-grad pass put a read after the write, and proof that it did.

While a check compiles, :class:`PostGradRecorder` watches Inductor's post-grad passes:

* every pass Inductor runs through ``GraphTransformObserver`` (``reorder_for_locality``, the
  pattern passes, a user's ``post_grad_custom_pre_pass`` / ``..._post_pass``, the reinplace pass)
  has the node order it received and produced recorded, so the pass that moved a reading node
  below the write is found by comparing the two (:func:`find_culprit`);
* right after ``reinplace_inplaceable_ops`` the graph still holds the ``auto_functionalized*``
  nodes with Inductor's decisions: :func:`~compile_checks.explain.refusals.replay.explain_refusals`
  turns each cloned argument into a :class:`~compile_checks.explain.refusals.records.Refusal`;
* only when a refusal has a culprit, the post-grad passes are re-run on a copy of the graph as
  Inductor received it with that pass disabled (``torch._inductor.config.disabled_passes``, the
  switch ``CompilerBisector`` also flips) and the clone decisions compared: a culprit is
  *verified* when the clone is gone. Graphs without a surviving clone pay no re-run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
import torch._inductor.config as inductor_config
import torch.fx
from torch._inductor import compile_fx as compile_fx_module
from torch._inductor.fx_passes import post_grad as post_grad_module
from torch._inductor.fx_passes import reinplace as inductor_reinplace
from torch.fx.passes.graph_transform_observer import GraphTransformObserver

from compile_checks.check.analysis_cache import graph_key
from compile_checks.check.graph.fx_helpers import is_clone
from compile_checks.check.graph.sites import is_view_scatter, scattered_source
from compile_checks.explain.refusals.records import Refusal
from compile_checks.explain.refusals.replay import cloned_args, explain_refusals, reconcile
from compile_checks.vocab import Cause

_SUBSYSTEM = "post_grad_passes"
_REINPLACE = "reinplace_inplaceable_ops"
_AF = (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2)


@dataclass(frozen=True)
class PassStep:
    """One post-grad pass: the node order (names) it received and produced."""

    name: str
    before: tuple[str, ...]
    after: tuple[str, ...]


@dataclass
class GraphRecord:
    """What one ``post_grad_passes`` call showed: pass orders, refusals, culprits, graph texts."""

    region: int
    ordinal: int  # n-th post-grad graph of this region
    placeholders: dict[str, int] = field(default_factory=dict)  # graph input name -> position
    passes: list[PassStep] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    culprits: dict[int, str] = field(default_factory=dict)  # refusal index -> pass name
    verified: dict[int, bool] = field(default_factory=dict)  # refusal index -> disabling it removes the clone
    clone_nodes: dict[str, int] = field(default_factory=dict)  # final-graph clone node -> refusal index
    before_reinplace: str = ""  # graph code as the reinplace pass received it
    post_grad: str = ""  # graph code after all post-grad passes
    inductor_log: dict[str, str] = field(default_factory=dict)


def find_culprit(passes: list[PassStep], reader: str, writer: str) -> str | None:
    """The first pass that received ``reader`` before ``writer`` and produced it after; None when the
    read already followed the write in every graph the passes received (the program's own order)."""
    for step in passes:
        if reader in step.before and writer in step.before and reader in step.after and writer in step.after:
            was_before = step.before.index(reader) < step.before.index(writer)
            now_after = step.after.index(reader) > step.after.index(writer)
            if was_before and now_after:
                return step.name
    return None


def copy_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A structural copy (same node names, meta dicts copied, fake values shared) to re-run passes on.
    Only the graph is copied up front; the GraphModule (which generates code) is built if a re-run happens."""
    copy = torch.fx.Graph()
    copy.output(copy.graph_copy(graph, {}))
    return copy


def cloned_without_pass(
    pristine: torch.fx.GraphModule, is_inference: bool, pass_name: str
) -> set[tuple[str, tuple[str, ...]]]:
    """(node, args) still cloned when the post-grad passes run on ``pristine`` with ``pass_name`` off."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    real_reinplace = inductor_reinplace.reinplace_inplaceable_ops

    def reinplace(fake_tensor_updater: Any, graph: torch.fx.Graph) -> None:
        real_reinplace(fake_tensor_updater, graph)
        seen.update(cloned_args(graph))

    with (
        inductor_config.patch(disabled_passes=pass_name),
        # the real pass (not a check's wrapper), so the re-run leaves the check's records alone
        mock.patch.object(post_grad_module, "reinplace_inplaceable_ops", reinplace),
    ):
        post_grad_module.post_grad_passes(pristine, is_inference)
    return seen


class _LogCapture(logging.Handler):
    """Inductor's ``Reinplace for <op> (wrapped by <node>) ...`` lines, by node name."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith("Reinplace for") and len(record.args or ()) >= 2:
            self.lines[str(record.args[1])] = record.getMessage()  # type: ignore[index]


@dataclass
class PostGradRecorder:
    """Context manager: records a :class:`GraphRecord` per post-grad graph compiled while active.

    ``region_index`` tells which compiled region is being compiled (the check's probe knows).
    Enter it inside the check's Inductor instrumentation so its wrappers wrap the check's.
    """

    region_index: Any  # Callable[[], int]
    keep_code: bool = False
    verify: bool = True
    records: list[GraphRecord] = field(default_factory=list)
    _current: GraphRecord | None = None
    _replaying: bool = False
    _log: _LogCapture = field(default_factory=_LogCapture)
    _without_culprits: set[str] = field(default_factory=set)  # graph_key of graphs that had no culprit

    @contextlib.contextmanager
    def active(self) -> Iterator[PostGradRecorder]:
        logger = logging.getLogger(inductor_reinplace.__name__)
        saved = (logger.level, logger.propagate)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
            logger.propagate = False  # we lowered the level for ourselves: nobody else sees it
        logger.addHandler(self._log)
        try:
            with (
                mock.patch.object(
                    compile_fx_module, "post_grad_passes", self._wrap_post_grad(compile_fx_module.post_grad_passes)
                ),
                mock.patch.object(
                    GraphTransformObserver,
                    "apply_graph_pass",
                    self._wrap_apply(GraphTransformObserver.apply_graph_pass),
                ),
                mock.patch.object(
                    GraphTransformObserver, "apply_gm_pass", self._wrap_apply(GraphTransformObserver.apply_gm_pass)
                ),
            ):
                yield self
        finally:
            logger.removeHandler(self._log)
            logger.setLevel(saved[0])
            logger.propagate = saved[1]

    def for_region(self, region: int) -> list[GraphRecord]:
        return [r for r in self.records if r.region == region]

    # ---- wrappers ------------------------------------------------------------------------
    def _wrap_post_grad(self, original: Any) -> Any:
        def post_grad_passes(gm: torch.fx.GraphModule, is_inference: bool) -> None:
            if self._replaying or not _has_candidates(gm.graph):
                return original(gm, is_inference)
            region = self.region_index()
            record = GraphRecord(region=region, ordinal=len(self.for_region(region)))
            record.placeholders = {n.name: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
            # a graph equal to one that had no culprit (identical blocks) has none either: no copy to re-run on
            key = graph_key(gm, ()) if self.verify else None
            pristine = copy_graph(gm.graph) if key is not None and key not in self._without_culprits else None
            self.records.append(record)
            self._current = record
            try:
                return original(gm, is_inference)
            finally:
                self._current = None
                if self.keep_code:
                    record.post_grad = gm.code
                map_clones(gm.graph, record)
                if key is not None and not record.culprits:
                    self._without_culprits.add(key)
                if pristine is not None and record.culprits:
                    self._verify(record, torch.fx.GraphModule(gm, pristine), is_inference)

        return post_grad_passes

    def _wrap_apply(self, original: Any) -> Any:
        recorder = self

        def apply(observer: GraphTransformObserver, pass_fn: Any) -> Any:
            record = recorder._current
            if record is None or recorder._replaying or observer.subsystem != _SUBSYSTEM:
                return original(observer, pass_fn)
            graph = observer.gm.graph
            before = tuple(n.name for n in graph.nodes)
            replayed: list[Refusal] = []
            if observer.passname == _REINPLACE:
                if recorder.keep_code:
                    record.before_reinplace = graph.python_code("self").src
                replayed = explain_refusals(graph)  # on the graph exactly as the pass receives it
            result = original(observer, pass_fn)
            record.passes.append(PassStep(observer.passname, before, tuple(n.name for n in graph.nodes)))
            if observer.passname == _REINPLACE:
                record.inductor_log = dict(recorder._log.lines)
                record.refusals = reconcile(replayed, graph, record.inductor_log)
                _find_culprits(record)
            return result

        return apply

    def _verify(self, record: GraphRecord, pristine: torch.fx.GraphModule, is_inference: bool) -> None:
        self._replaying = True
        try:
            for name in sorted(set(record.culprits.values())):
                still = cloned_without_pass(pristine, is_inference, name)
                for i, culprit in record.culprits.items():
                    if culprit == name:
                        r = record.refusals[i]
                        record.verified[i] = (r.node, r.args) not in still
        finally:
            self._replaying = False


def _has_candidates(graph: torch.fx.Graph) -> bool:
    """Anything the reinplace pass may clone: a functionalized custom op, an in-placeable ATen write, or a
    view scatter (canonicalized by the pass into its in-placeable ``_generalized_scatter``)."""
    return any(
        n.op == "call_function"
        and (n.target in _AF or n.target in inductor_reinplace.inplaceable_ops or is_view_scatter(n))
        for n in graph.nodes
    )


def _find_culprits(record: GraphRecord) -> None:
    passes = [p for p in record.passes if p.name != _REINPLACE]
    for i, r in enumerate(record.refusals):
        if r.cause != Cause.READ_AFTER_WRITE:
            continue
        for reader in r.readers:
            culprit = find_culprit(passes, reader.node, r.node)
            if culprit is not None:
                record.culprits[i] = culprit
                break


def map_clones(graph: torch.fx.Graph, record: GraphRecord) -> None:
    """Final-graph ``aten.clone`` nodes made by the decomposition -> the refusal they stand for
    (same base tensor under the clone's view chain; graph order breaks ties); and view scatters Inductor
    made (a write through a view of a pool, scattered back into the whole pool) -> the refusal of the write
    whose result they scatter."""
    if not record.refusals:
        return
    before = set(record.passes[0].before) if record.passes else set()
    used: set[int] = set()
    for node in graph.nodes:
        if not is_clone(node) or node.name in before:
            continue
        src = node.args[0]
        root = inductor_reinplace._get_view_base(src) if isinstance(src, torch.fx.Node) else None
        if root is None:
            continue
        for i, r in enumerate(record.refusals):
            if i not in used and root.name in (r.base, r.placeholder):
                record.clone_nodes[node.name] = i
                used.add(i)
                break
    by_write = {r.node: i for i, r in reversed(list(enumerate(record.refusals)))}
    for node in graph.nodes:
        if node.name in before or node.name in record.clone_nodes or not is_view_scatter(node):
            continue
        write = scattered_source(node)
        if write is not None and write.name in by_write:
            record.clone_nodes[node.name] = by_write[write.name]


__all__ = [
    "GraphRecord",
    "PassStep",
    "PostGradRecorder",
    "cloned_without_pass",
    "copy_graph",
    "find_culprit",
    "map_clones",
]
