"""Writes that really happen: lost writes, undeclared writes, and vLLM's side-effect KV update.

The copy check trusts op schemas: a pool is written where an op declares ``(a!)``. Two ways
an engine's KV cache write escapes that:

* **undeclared write**: an opaque (non-ATen) op writes a named pool while its schema declares
  no mutation of it (vLLM's ``unified_kv_cache_update`` takes the cache from the forward
  context, ``mutates_args=[]``; engines copy it). Inductor sees a pure op: it may drop it
  (its dummy output unused, or read by nothing Inductor keeps), reorder it or CSE around it.
  :class:`RegionWriteWatch` runs every compiled graph (analysis-only FX run and Inductor's
  generated wrapper alike: both call opaque ops through the dispatcher) under a
  :class:`WriteWatcher` dispatch mode that diffs the named pools around each opaque op call.
  Version counters cannot do this: under a dispatch mode the op's kernel is redispatched below
  ``ADInplaceOrView``, so an in-place ATen op inside it bumps no ``_version`` (torch 2.13: 0 -> 0
  with a mode, 0 -> 1 without), so the watcher compares bytes against a shadow copy.
* **lost write**: the compiled run never wrote what eager wrote (AOT autograd's dead-code
  elimination drops a no-mutation op whose output is unused before the post-grad graph;
  Inductor's lowering/codegen drops one whose output only feeds a size-0 reduction). :func:`eager_reference`
  runs the case eagerly from a snapshot (recording which op wrote which pool rows), restores
  the snapshot in place, and :meth:`EagerReference.compare` diffs the compiled run's pools
  against it row by row (dim 0).

vLLM's own pattern (``vllm::unified_kv_cache_update`` whose dummy output feeds
``vllm::unified_attention_with_output``) is recognised: its writes are attributed to the
forward-context pools and do not fail as undeclared; the case fails if the op's output no
longer feeds an op Inductor must keep, or (full codegen) the op is missing from Inductor's
generated code. vLLM's attention ops writing the cache themselves (a backend whose forward includes
the KV update) are recognised the same way (they declare ``output`` mutated: Inductor keeps them).

Cost: a compiled graph that calls no opaque op runs unwatched; one that does pays a copy and a
compare of every named pool around each opaque call (memory bandwidth, no compile). The lost-write
check costs one eager run of the case and four copies of the pools (snapshot, before, after, shadow).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode

from compile_checks.check.runtime_pools import PoolIndex
from compile_checks.vocab import WriteProblem

# namespaces whose ops' schemas are trusted: an op there writes only what it declares
TRUSTED_NAMESPACES: frozenset[str] = frozenset(
    {"aten", "prims", "inductor", "_c10d_functional", "c10d_functional", "profiler", "debugprims"}
)
# vLLM 0.33's side-effect KV write and the op its dummy output must feed (ordering + liveness)
VLLM_KV_UPDATE_OPS: frozenset[str] = frozenset({"vllm::unified_kv_cache_update", "vllm::unified_mla_kv_cache_update"})
# vLLM's attention ops: with a backend whose forward includes the KV update they write the forward
# context's cache themselves; they declare ``output`` mutated, so Inductor keeps them (a fallback with side effects)
VLLM_ATTENTION_OPS: frozenset[str] = frozenset(
    {"vllm::unified_attention_with_output", "vllm::unified_mla_attention_with_output"}
)
# relative tolerance (of the pool's scale, max |eager|, at least 1) under which a row counts as equal
ROW_TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}


@dataclass(frozen=True)
class WriteFinding:
    """One write problem (or one attributed side-effect write) the check saw.

    ``kind``: a :class:`WriteProblem`; ``fails``: whether it fails the case (an attributed vLLM
    side-effect write is reported, not failed); ``rows``: pool rows (dim 0) concerned.
    """

    kind: WriteProblem
    pool: str
    op: str
    message: str
    rows: tuple[int, ...] = ()
    nbytes: int = 0
    region: int | None = None
    fails: bool = True
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "pool": self.pool,
            "op": self.op,
            "message": self.message,
            "rows": list(self.rows),
            "nbytes": self.nbytes,
            "region": self.region,
            "fails": self.fails,
            "details": dict(self.details),
        }


# ---- bytes ------------------------------------------------------------------------------------


def op_name(func: Any) -> str:
    """``ns::name`` (``.overload`` dropped unless not default) of an OpOverload, else its repr."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return str(func)
    overload = schema.overload_name
    return f"{schema.name}.{overload}" if overload and overload != "default" else schema.name


def is_opaque(func: Any) -> bool:
    """An op whose body the check cannot see: a dispatcher op outside the trusted namespaces."""
    return isinstance(func, torch._ops.OpOverload) and func.namespace not in TRUSTED_NAMESPACES


def declared_mutations(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
    """The tensors an op call declares it writes (``Tensor(a!)`` arguments, lists flattened)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return []
    out: list[torch.Tensor] = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(a.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        out += [v for v in values if isinstance(v, torch.Tensor)]
    return out


def _rows_view(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(1, -1) if t.dim() == 0 else t.reshape(t.shape[0], -1)


def changed_rows(before: torch.Tensor, after: torch.Tensor) -> list[int]:
    """Rows (dim 0) whose bytes differ; NaN equals NaN (a pool may start as garbage)."""
    if before.numel() == 0:
        return []
    ne = before != after
    if before.is_floating_point() or before.is_complex():
        ne &= ~(before.isnan() & after.isnan())
    return _rows_view(ne).any(dim=1).nonzero().flatten().tolist()


def row_bytes(pool: torch.Tensor) -> int:
    rows = 1 if pool.dim() == 0 else max(pool.shape[0], 1)
    return pool.numel() * pool.element_size() // rows


def _fmt_rows(rows: tuple[int, ...] | list[int], limit: int = 8) -> str:
    shown = ", ".join(map(str, list(rows)[:limit]))
    return f"[{shown}{', ...' if len(rows) > limit else ''}] ({len(rows)} row(s))"


# ---- the dispatch mode ------------------------------------------------------------------------


@dataclass(frozen=True)
class ObservedWrite:
    """One op call that changed rows of a named pool."""

    op: str
    pool: str
    rows: tuple[int, ...]
    declared: bool  # the call declared a mutation of (a view of) this pool


class WriteWatcher(TorchDispatchMode):
    """Diff the named pools around op calls; see the module docstring.

    Around each opaque op: every pool it does not declare to write (an undeclared write).
    With ``declared=True`` also around each op that declares writing a pool: that pool (to name
    the op that wrote each row, for lost-write messages). Trusted (ATen) ops that declare no
    write are not diffed. The mode is off inside an op's kernel, so the outermost op is named.
    """

    # higher-order ops (auto_functionalized in a graph the post-grad hook never saw, invoke_subgraph ...)
    # run unwatched: what they call is not diffed (the copy check lists such graphs as unanalysed)
    supports_higher_order_operators = True

    def __init__(self, pools: Mapping[str, torch.Tensor], *, declared: bool = False) -> None:
        super().__init__()
        self.pools = dict(pools)
        self.index = PoolIndex(self.pools)
        self.declared = declared
        self.writes: list[ObservedWrite] = []
        self.opaque_calls: dict[str, int] = {}
        self._shadow: dict[str, torch.Tensor] = {}

    def _snapshot(self, name: str) -> torch.Tensor:
        pool = self.pools[name]
        shadow = self._shadow.get(name)
        if shadow is None:
            shadow = self._shadow[name] = torch.empty_like(pool)
        shadow.copy_(pool)
        return shadow

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not isinstance(func, torch._ops.OpOverload) or not self.pools:
            return func(*args, **kwargs)
        written = declared_mutations(func, args, kwargs)
        declared = {n for t in written for n in self.index.touched(t)}
        opaque = is_opaque(func)
        watch = set(declared) if self.declared else set()
        if opaque:
            self.opaque_calls[op_name(func)] = self.opaque_calls.get(op_name(func), 0) + 1
            watch |= set(self.pools) - declared
        if not watch:
            return func(*args, **kwargs)
        with torch.no_grad():
            before = {n: self._snapshot(n) for n in sorted(watch)}
        out = func(*args, **kwargs)
        name = op_name(func)
        for n, shadow in before.items():
            rows = changed_rows(shadow, self.pools[n])
            if rows:
                self.writes.append(ObservedWrite(name, n, tuple(rows), n in declared))
        return out


# ---- compiled regions: undeclared writes, anchoring, generated code --------------------------


@dataclass
class OpaqueNode:
    """An opaque op in a final post-grad graph that declares no mutation."""

    op: str
    node: str
    anchored: bool  # its output feeds something Inductor must keep
    in_generated_code: bool | None = None  # None: analysis-only (no generated code)


def _keeps(user: torch.fx.Node, seen: set[torch.fx.Node]) -> bool:
    """Whether ``user`` keeps its inputs alive through Inductor's codegen."""
    if user.op == "output":
        return True
    if user.op != "call_function":
        return False
    target = user.target
    if target is operator.getitem:
        return _anchored(user, seen)
    if is_opaque(target):
        if declares_write(target):
            return True  # a fallback kernel with side effects: never dropped, reads every input
        return _anchored(user, seen)
    return False


def _anchored(node: torch.fx.Node, seen: set[torch.fx.Node]) -> bool:
    """An op's result reaches the graph output or a side-effecting opaque op through opaque ops.

    ATen consumers do not count: Inductor lowers them and may never read a size-0 dummy
    (``q + dummy.sum()`` drops the op from the generated code though the FX graph keeps it).
    """
    if node in seen:
        return False
    seen.add(node)
    return any(_keeps(u, seen) for u in node.users)


def declares_write(op: Any) -> bool:
    """Whether an op's schema declares a mutation of any argument."""
    schema = getattr(op, "_schema", None)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _pure_opaque(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and is_opaque(node.target) and not declares_write(node.target)


def opaque_nodes(gm: torch.fx.GraphModule, source_code: str | None) -> list[OpaqueNode]:
    """Every no-mutation opaque op of the final graph, anchored or not, and in the generated code?"""
    out = []
    for node in gm.graph.nodes:
        if not _pure_opaque(node):
            continue
        ns, _, name = op_name(node.target).partition(".")[0].partition("::")
        emitted = None if source_code is None else f"{ns}.{name}." in source_code
        out.append(OpaqueNode(op_name(node.target), node.name, _anchored(node, set()), emitted))
    return out


@dataclass
class RegionWrites:
    """What one compiled inner graph's runs wrote undeclared."""

    region: int
    nodes: list[OpaqueNode]
    writes: dict[tuple[str, str], set[int]] = field(default_factory=dict)  # (op, pool) -> rows


class RegionWriteWatch:
    """The probe's hook: records each compiled graph's opaque ops and watches its runs.

    :meth:`on_compiled` is called by the backend once per inner compile with the OutputCode
    and the final post-grad graph; it wraps ``current_callable`` so every run goes through a
    :class:`WriteWatcher`. ``received``: the probe's set of pools a region reached (a pool a
    side-effect op wrote is reached, though no graph input holds it).
    """

    def __init__(self, pools: Mapping[str, torch.Tensor] | None, received: set[str]) -> None:
        self.pools = dict(pools or {})
        self.received = received
        self.graphs: list[RegionWrites] = []

    def on_compiled(self, out: Any, gm: torch.fx.GraphModule, region: int) -> None:
        source = getattr(out, "source_code", None)
        rw = RegionWrites(region, opaque_nodes(gm, source if isinstance(source, str) else None))
        self.graphs.append(rw)
        current = getattr(out, "current_callable", None)
        # only opaque ops can write undeclared (ATen schemas are trusted), and the generated code
        # calls no opaque op its post-grad graph did not hold: a graph without one runs unwatched
        has_opaque = any(n.op == "call_function" and is_opaque(n.target) for n in gm.graph.nodes)
        if current is None or not self.pools or not has_opaque:
            return
        pools, received = self.pools, self.received

        @functools.wraps(current)
        def call(args: list[Any]) -> Any:
            watcher = WriteWatcher(pools)
            try:
                with watcher:
                    return current(args)
            finally:
                for w in watcher.writes:
                    rw.writes.setdefault((w.op, w.pool), set()).update(w.rows)
                    received.add(w.pool)

        out.current_callable = call

    def findings(self) -> list[WriteFinding]:
        """Undeclared writes (failing), vLLM's attributed side-effect writes, dropped KV-update ops."""
        found: list[WriteFinding] = []
        for rw in self.graphs:
            by_op = {n.op: n for n in rw.nodes}
            for (op, pool), rows in sorted(rw.writes.items()):
                found.append(_write_finding(op, pool, tuple(sorted(rows)), rw.region, by_op.get(op), self.pools[pool]))
            for n in rw.nodes:
                if n.op not in VLLM_KV_UPDATE_OPS:
                    continue
                where = f"region {rw.region} node {n.node}"
                if n.in_generated_code is False:
                    found.append(
                        WriteFinding(
                            WriteProblem.DROPPED_WRITE_OP,
                            "",
                            n.op,
                            region=rw.region,
                            message=f"{n.op} ({where}) is in the final post-grad graph but not in Inductor's generated "
                            "code: the compiled region never writes its KV cache",
                        )
                    )
                elif not n.anchored:
                    found.append(
                        WriteFinding(
                            WriteProblem.UNANCHORED_WRITE_OP,
                            "",
                            n.op,
                            region=rw.region,
                            message=f"{n.op} ({where}): its dummy output feeds no op Inductor must keep "
                            "(vLLM passes it to unified_attention_with_output as kv_cache_dummy_dep); "
                            "Inductor's codegen may drop the KV write",
                        )
                    )
        return found


def _write_finding(
    op: str, pool: str, rows: tuple[int, ...], region: int, node: OpaqueNode | None, tensor: torch.Tensor
) -> WriteFinding:
    nbytes = len(rows) * row_bytes(tensor)
    anchored = node.anchored if node is not None else None
    emitted = node.in_generated_code if node is not None else None
    details = {"anchored": anchored, "in_generated_code": emitted, "node": node.node if node else None}
    if op in VLLM_ATTENTION_OPS or (op in VLLM_KV_UPDATE_OPS and anchored):
        why = (
            "recognised: a backend whose forward includes the KV update; the op declares its output mutated, "
            "so Inductor keeps it"
            if op in VLLM_ATTENTION_OPS
            else "recognised side-effect write: its dummy output orders it before attention"
        )
        return WriteFinding(
            WriteProblem.SIDE_EFFECT_WRITE,
            pool,
            op,
            rows=rows,
            nbytes=nbytes,
            region=region,
            fails=False,
            details={**details, "anchored": True},
            message=f"{op} wrote pool {pool!r} rows {_fmt_rows(rows)}, {nbytes} bytes, through vLLM's forward "
            f"context ({why})",
        )
    risk = "Inductor may drop, reorder or CSE around it"
    if anchored is False:
        risk = "its output feeds nothing Inductor must keep: Inductor's codegen may drop it"
    return WriteFinding(
        WriteProblem.UNDECLARED_WRITE,
        pool,
        op,
        rows=rows,
        nbytes=nbytes,
        region=region,
        details=details,
        message=f"{op} wrote pool {pool!r} (rows {_fmt_rows(rows)}, {nbytes} bytes) in region {region} though its "
        f"schema declares no mutation of it: {risk}; declare the write (Tensor(a!) / mutates_args)",
    )


# ---- lost writes: the eager reference ----------------------------------------------------------


def _tensors(obj: Any, out: list[torch.Tensor], depth: int = 4) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif depth > 0 and isinstance(obj, (list, tuple)):
        for x in obj:
            _tensors(x, out, depth - 1)
    elif depth > 0 and isinstance(obj, Mapping):
        for x in obj.values():
            _tensors(x, out, depth - 1)


class StateSnapshot:
    """Copies of the tensors a case run writes (pools, tensor args, a module's buffers), restorable in place."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        seen: set[int] = set()
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        for t in tensors:
            if id(t) in seen or t.is_meta:
                continue
            seen.add(id(t))
            self.saved.append((t, t.detach().clone()))
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore(self) -> None:
        for t, saved in self.saved:
            ctx = torch.inference_mode() if t.is_inference() else torch.no_grad()
            with ctx:
                t.copy_(saved)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)


@dataclass
class EagerReference:
    """The named pools after an eager run of the case, and which op wrote each row."""

    before: dict[str, torch.Tensor]
    after: dict[str, torch.Tensor]
    # pool -> row -> the last op that changed it in the eager run
    writers: dict[str, dict[int, str]]
    notes: list[str] = field(default_factory=list)

    def compare(self, pools: Mapping[str, torch.Tensor]) -> list[WriteFinding]:
        """A ``lost_write`` per pool whose rows the compiled run left different from eager."""
        found = []
        for name, eager_after in self.after.items():
            if name not in pools:
                self.notes.append(f"pool {name!r} is gone after the compiled run: not compared")
                continue
            now = pools[name].detach()
            before = self.before[name]
            if now.numel() == 0:
                continue
            diff = _differs(now, eager_after)
            rows = _rows_view(diff).any(dim=1).nonzero().flatten().tolist()
            if not rows:
                continue
            unwritten = [r for r in rows if not _row_changed(now, before, r)]
            extra = [r for r in rows if not _row_changed(eager_after, before, r)]
            writers = sorted({self.writers.get(name, {}).get(r, "?") for r in rows} - {"?"})
            by = ", ".join(writers) or "an op the check did not see"
            nbytes = len(rows) * row_bytes(now)
            parts = [f"{len(unwritten)} never written by the compiled run"] if unwritten else []
            parts += [f"{len(extra)} written only by the compiled run"] if extra else []
            what = "; ".join(parts) or "written differently"
            found.append(
                WriteFinding(
                    WriteProblem.LOST_WRITE,
                    name,
                    by,
                    rows=tuple(rows),
                    nbytes=nbytes,
                    details={"unwritten_rows": unwritten, "compiled_only_rows": extra, "eager_writers": writers},
                    message=f"pool {name!r}: rows {_fmt_rows(rows)} differ from the eager run after the compiled run "
                    f"({what}; {nbytes} bytes); eager wrote them with {by}",
                )
            )
        return found


def _row_changed(a: torch.Tensor, before: torch.Tensor, r: int) -> bool:
    return bool(changed_rows(before[r : r + 1], a[r : r + 1]))


def _differs(now: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    if not (now.is_floating_point() or now.is_complex()):
        return now != ref
    scale = max(1.0, float(ref.abs().nan_to_num(0.0, 0.0, 0.0).max()))
    tol = ROW_TOLERANCE.get(now.dtype, 0.0) * scale
    d = (now.to(torch.float64) - ref.to(torch.float64)).abs() > tol
    return (d | (now.isnan() != ref.isnan())) & ~(now.isnan() & ref.isnan())


def eager_reference(
    pools: Mapping[str, torch.Tensor], state: list[torch.Tensor], run: Callable[[], Any]
) -> EagerReference:
    """Run ``run()`` (the case, eagerly) and restore everything it wrote; the pools after, and their writers.

    ``state``: every tensor the run may write (the pools, tensor args, a module's buffers); it is
    snapshotted with the RNG state first and restored in place after, so the compiled run starts
    from the same state.
    """
    pools = dict(pools)
    snapshot = StateSnapshot([*pools.values(), *state])
    before = {n: t.detach().clone() for n, t in pools.items()}
    watcher = WriteWatcher(pools, declared=True)
    try:
        with watcher:
            run()
        after = {n: t.detach().clone() for n, t in pools.items()}
    finally:
        snapshot.restore()
    writers: dict[str, dict[int, str]] = {}
    for w in watcher.writes:
        rows = writers.setdefault(w.pool, {})
        for r in w.rows:
            rows[r] = w.op
    return EagerReference(before, after, writers)


def tensors_in(*objs: Any) -> list[torch.Tensor]:
    """The tensors in (nested tuples, lists, mappings of) ``objs``; a module's buffers."""
    out: list[torch.Tensor] = []
    for obj in objs:
        if isinstance(obj, torch.nn.Module):
            out += list(obj.buffers())
        else:
            _tensors(obj, out)
    return out


__all__ = [
    "ROW_TOLERANCE",
    "TRUSTED_NAMESPACES",
    "VLLM_ATTENTION_OPS",
    "VLLM_KV_UPDATE_OPS",
    "EagerReference",
    "ObservedWrite",
    "OpaqueNode",
    "RegionWriteWatch",
    "StateSnapshot",
    "WriteFinding",
    "WriteWatcher",
    "changed_rows",
    "eager_reference",
    "opaque_nodes",
    "tensors_in",
]
