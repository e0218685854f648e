"""Which caller tensor a graph input is: what the trace says, and the user's ``--pools`` mapping.

A post-grad graph names its inputs ``arg6_1``; which pool that is, the graph text does not say.
The trace often does: AOT's graph maps each input to a Dynamo input, whose placeholder name and
``describe_source`` give its source (``L['v_pools'][0]``, ``L['self'].k_pool``) and storage id
(two inputs with one storage id are views of one allocation). A pool name is never guessed from
that: it comes from ``--pools pools.toml``, whose ``[pools]`` table maps an input (by post-grad
name ``arg6_1``, position ``"6"``, Dynamo name ``L_v_pools_0_`` or source ``L['v_pools'][0]``)
to a pool name.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from compile_checks.errors import UsageError
from compile_checks.scan.artifacts import GraphArtifacts, InputSource


@dataclass(frozen=True)
class PoolMap:
    """Input key (post-grad name, position, Dynamo name or source) -> pool name."""

    names: dict[str, str]

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
        return PoolMap({str(k): v for k, v in table.items()})

    def pool_of(self, placeholder: str, position: int, source: InputSource | None) -> str | None:
        keys = [placeholder, str(position)]
        if source is not None:
            keys += [source.name] + ([source.source] if source.source else [])
        for key in keys:
            if key in self.names:
                return self.names[key]
        return None


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


__all__ = ["PoolMap", "describe_input", "storage_sharers"]
