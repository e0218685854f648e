"""Which caller tensor a graph input is: what the trace says, and the user's ``--pools`` mapping.

A post-grad graph names its inputs ``arg6_1``; which pool that is, the graph text does not say.
The trace often does: AOT's graph maps each input to a Dynamo input, whose placeholder name and
``describe_source`` give its source (``L['v_pools'][0]``, ``L['self'].k_pool``) and storage id
(two inputs with one storage id are views of one allocation). A pool name is never guessed from
that: it comes from ``--pools pools.toml``, whose ``[pools]`` table maps an input (by post-grad
name ``arg6_1``, position ``"6"``, Dynamo name ``L_v_pools_0_`` or source ``L['v_pools'][0]``)
to a pool name. An entry that names no input of any scanned graph is a usage error naming it
(:func:`check_pools_match`): a typo would otherwise leave that pool's copies silently unattributed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from compile_checks.errors import UsageError
from compile_checks.scan.artifacts import GraphArtifacts, InputSource


@dataclass(frozen=True)
class PoolMap:
    """Input key (post-grad name, position, Dynamo name or source) -> pool name; ``origin`` the file it came from."""

    names: dict[str, str]
    origin: str | None = None

    @staticmethod
    def load(path: Path | None) -> PoolMap:
        if path is None:
            return PoolMap({})
        try:
            with path.open("rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise UsageError(f"--pools {path}: {e.strerror}") from None
        except tomllib.TOMLDecodeError as e:
            raise UsageError(f"--pools {path}: not valid TOML: {e}") from None
        table = data.get("pools")
        if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
            raise UsageError(f'--pools {path}: needs a [pools] table of input = "pool name" strings')
        return PoolMap({str(k): v for k, v in table.items()}, str(path))

    def pool_of(self, placeholder: str, position: int, source: InputSource | None) -> str | None:
        keys = [placeholder, str(position)]
        if source is not None:
            keys += [source.name] + ([source.source] if source.source else [])
        for key in keys:
            if key in self.names:
                return self.names[key]
        return None


def input_keys(graph: GraphArtifacts) -> list[str]:
    """Every key a ``--pools`` entry can name one of the graph's inputs by: post-grad name, position
    (``"6"``), Dynamo name, source; none for a graph that logged no readable post-grad graph."""
    from compile_checks.scan.fx_text import GraphTextError, forward_parameters

    if not graph.post_grad:
        return []
    try:
        names = forward_parameters(graph.post_grad)
    except GraphTextError:
        return []
    keys = [*names, *(str(i) for i in range(len(names)))]
    for src in graph.inputs.values():
        keys += [src.name] + ([src.source] if src.source else [])
    return keys


def unmatched_entries(pools: PoolMap, graphs: Sequence[GraphArtifacts]) -> list[str]:
    """The ``--pools`` keys that name no input of any graph (a typo, or a mapping for another program)."""
    seen = {k for g in graphs for k in input_keys(g)}
    return [k for k in pools.names if k not in seen]


def check_pools_match(pools: PoolMap, graphs: Sequence[GraphArtifacts], judged: Iterable[str]) -> None:
    """A usage error naming each ``--pools`` entry that matched nothing, and each pool judged on its own
    (``[tool.compile_checks.scan] pools``) that no entry maps an input to: either would leave a pool's
    copies silently unattributed (and a per-pool negative control reading "lost its power")."""
    problems = []
    for key in unmatched_entries(pools, graphs):
        problems.append(
            f"this --pools entry matched nothing: {key!r} = {pools.names[key]!r} names no input of any graph "
            "(by post-grad name, position, Dynamo name or source)"
        )
    mapped = set(pools.names.values())
    for pool in judged:
        if pool not in mapped:
            problems.append(
                f"pool {pool!r} of [tool.compile_checks.scan] pools is judged on its own, "
                "but no --pools entry maps an input to it"
            )
    if problems:
        shown = sorted({k for g in graphs for k in input_keys(g) if not k.isdigit()})
        inputs = ", ".join(shown[:12]) + (", ..." if len(shown) > 12 else "") if shown else "none logged"
        where = f"--pools {pools.origin}: " if pools.origin else ""
        raise UsageError(where + "; ".join(problems) + f" (the graphs' inputs: {inputs})")


def describe_input(graph: GraphArtifacts, placeholder: str) -> str:
    """``L['v_pools'][0]`` (the source), else Dynamo's name, else the post-grad name."""
    src = graph.inputs.get(placeholder)
    if src is None:
        return placeholder
    return src.source or src.name


def storage_sharers(graph: GraphArtifacts, placeholder: str) -> list[str]:
    """Other inputs of the graph that Dynamo saw in the same storage as ``placeholder``."""
    src = graph.inputs.get(placeholder)
    if src is None or src.storage is None:
        return []
    return [
        describe_input(graph, name)
        for name, other in graph.inputs.items()
        if name != placeholder and other.storage == src.storage
    ]


__all__ = ["PoolMap", "check_pools_match", "describe_input", "input_keys", "storage_sharers", "unmatched_entries"]
