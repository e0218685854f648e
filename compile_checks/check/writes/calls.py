"""The write check per compiled call: each call of a region against its own captured graph, run eagerly.

Dynamo has lifted everything a region reads into its inputs and guarded the rest, so one call of the
region is a pure function of that call's inputs (and the RNG). :class:`CallWriteCheck` wraps each
region's compiled callable; on every call it

1. runs the region's captured dynamo graph eagerly on the call's own inputs under an undo log
   (:func:`~.lost.eager_reference`: the pre-image of exactly what each op writes), with the CPU and
   CUDA RNG states saved first,
2. keeps, per named pool, the elements the eager graph wrote (storage offsets, values),
3. puts every pre-image back and the RNG states (the compiled run draws what it would have drawn
   without the check),
4. runs the compiled artifact on the same inputs, and
5. compares the same elements (:meth:`~.lost.EagerReference.compare`).

No host loop is replayed and no Python state needs resetting: the user's driver runs once, with the
compiled outputs. A write dropped in any call is caught at that call. Extra memory is what one call
writes (pre-images, eager's values, offsets), released after the call.

On a region's first :attr:`CallWriteCheck.scan_calls` call(s) (every call when it is None: the full
mode, whose generated code can go wrong on any call) the pools the call can reach (those sharing storage
with its inputs, and those the eager graph wrote) are also checksummed per dim
(:func:`~.positions.dim_checksums`): before the eager graph (are they back after the rollback?) and after the
compiled run (did it write elements the eager graph did not?). Those passes read each such pool; on
calls not scanned only the written elements are read.

What it cannot see: a write the eager graph makes where no dispatch mode sees it (an opaque C++ op
writing memory it does not declare), writes made outside compiled regions (the host loop's own), and,
on calls not scanned (after the first call(s) of a region, analysis-only), compiled writes outside the
elements the eager graph wrote.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from compile_checks.check.writes.finding import WriteFinding
from compile_checks.check.writes.lost import eager_reference
from compile_checks.check.writes.positions import index_runs
from compile_checks.vocab import WriteProblem

# calls of each region whose reachable pools are also checksummed whole (rollback verified, stray writes)
SCAN_CALLS = 1


@dataclass
class _Seen:
    """Findings of one (region, pool, kind): the first call's, and the calls it recurred in."""

    first: WriteFinding
    calls: list[int] = field(default_factory=list)


def eager_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The captured graph as a module of its own (Inductor's pre-grad passes rewrite ``gm``'s graph in
    place); it shares ``gm``'s attributes (parameters, constants), never copies them."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


def _handed(pools: Mapping[str, torch.Tensor], inputs: Sequence[Any]) -> set[str]:
    """Named pools sharing storage with a tensor input of the call."""
    ptrs = {
        t.untyped_storage().data_ptr()
        for t in inputs
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_meta
    }
    return {n for n, p in pools.items() if p.untyped_storage().data_ptr() in ptrs}


class CallWriteCheck:
    """The per-call write check of one session: :meth:`wrap` each region's compiled callable.

    ``pools``: a zero-argument callable returning the named pools as they are now (a rebuilt cache is
    followed). ``label``: a region index -> a short name for messages. ``scan_calls``: the calls of each
    region whose reachable pools are scanned whole (None: every call).
    """

    def __init__(
        self,
        pools: Callable[[], Mapping[str, torch.Tensor]],
        label: Callable[[int], str] = lambda i: f"region {i}",
        scan_calls: int | None = SCAN_CALLS,
    ) -> None:
        self.pools = pools
        self.label = label
        self.scan_calls = scan_calls
        self.calls: dict[int, int] = {}  # region -> calls checked
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.peak_saved_bytes = 0  # the most pre-image bytes one call held
        self.eager_running = False  # inside a call's eager run of its captured graph
        self._seen: dict[tuple[int, str, str], _Seen] = {}
        self._rescan: set[int] = set()  # regions whose next call is scanned (a call of theirs differed)
        self._diverged: set[int] = set()  # regions whose eager and compiled runs were seen to start apart

    @staticmethod
    def eager_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        """The region's captured graph, kept apart before Inductor's passes rewrite it (:func:`eager_copy`)."""
        return eager_copy(gm)

    def wrap(self, region: int, gm: torch.fx.GraphModule, compiled: Callable[..., Any]) -> Callable[..., Any]:
        """``compiled`` checked on each call against ``gm`` (the region's captured graph, see :func:`eager_copy`)."""
        boxed = bool(getattr(compiled, "_boxed_call", False))

        @functools.wraps(compiled)
        def run(*args: Any, **kwargs: Any) -> Any:
            # a boxed callee takes one list (and empties it); dynamo may still call it with the inputs spread
            one_list = boxed and len(args) == 1 and isinstance(args[0], list)
            inputs = list(args[0]) if one_list else list(args)
            pools = {n: t for n, t in (self.pools() or {}).items() if not t.is_meta}
            if not pools or kwargs:
                return compiled(*args, **kwargs)
            call = self.calls[region] = self.calls.get(region, 0) + 1
            scan = self.scan_calls is None or call <= self.scan_calls or region in self._rescan
            self._rescan.discard(region)
            handed = _handed(pools, inputs)
            self.eager_running = True
            try:
                ref = eager_reference(pools, lambda: gm(*inputs), scan=handed if scan else (), scan_written=scan)
            except Exception as e:  # the state is restored; the compiled call still runs
                self._error(region, call, f"its captured graph failed eagerly ({type(e).__name__}: {e})")
                return compiled(*args, **kwargs)
            finally:
                self.eager_running = False
            self.peak_saved_bytes = max(self.peak_saved_bytes, ref.saved_bytes)
            out = compiled(*args, **kwargs)
            for error in ref.errors:
                self._error(region, call, error)
            self.notes += [n for n in ref.notes if n not in self.notes]
            if any(not w.restored for w in ref.pools.values()):
                self._diverged.add(region)
            for f in ref.compare(pools, scan=scan):
                if f.kind == WriteProblem.DIVERGED_STATE:
                    self._diverged.add(region)
                elif not scan:  # the next call is scanned: did the two runs start apart?
                    self._rescan.add(region)
                key = (region, f.pool, str(f.kind))
                seen = self._seen.get(key)
                if seen is None:
                    self._seen[key] = _Seen(dataclasses.replace(f, region=region), [call])
                else:
                    seen.calls.append(call)
            return out

        if boxed:
            run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def _error(self, region: int, call: int, what: str) -> None:
        prefix = f"write check, {self.label(region)}"
        if any(e.startswith(prefix) for e in self.errors):
            return  # one per region: the same error on every call says nothing more
        self.errors.append(f"{prefix} call {call}: {what}")

    def findings(self) -> list[WriteFinding]:
        """One finding per (region, pool, kind): the first call's positions, the calls it recurred in."""
        out = []
        merged: dict[tuple[int, str, str], _Seen] = {}
        for (region, pool, kind), seen in self._seen.items():
            if region in self._diverged and kind == WriteProblem.LOST_WRITE:
                # the region's runs were seen to start apart: its unscanned differences are that, not a loss
                key = (region, pool, str(WriteProblem.DIVERGED_STATE))
                other = self._seen.get(key)
                if other is not None:
                    other.calls[:] = sorted({*other.calls, *seen.calls})
                    continue
                f = seen.first
                seen = _Seen(dataclasses.replace(f, kind=WriteProblem.DIVERGED_STATE, message=_diverged(f)), seen.calls)
                kind = str(WriteProblem.DIVERGED_STATE)
            merged.setdefault((region, pool, kind), seen)
        for (region, _pool, _kind), seen in merged.items():
            f, total = seen.first, self.calls.get(region, 0)
            again = seen.calls[1:]
            more = f"; again in {len(again)} later call(s) ({index_runs(again, limit=4)})" if again else ""
            where = f"{self.label(region)}, call {seen.calls[0]} of {total}"
            details = {**f.details, "calls": list(seen.calls), "of_calls": total}
            out.append(dataclasses.replace(f, message=f"{where}: {f.message}{more}", details=details))
        return out


def _diverged(f: WriteFinding) -> str:
    where = f.message.split(": ", 1)[-1].split(" differ from eager", 1)[0]
    return (
        f"pool {f.pool!r}: the compiled run left {where} not as eager did, and another call of this region was seen "
        "starting from another state than its eager run"
    )


__all__ = ["SCAN_CALLS", "CallWriteCheck", "eager_copy"]
