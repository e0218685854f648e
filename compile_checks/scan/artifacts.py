"""What the scan reads per compiled graph, whatever the artifact format: plain data, and the errors.

A *graph* is one post-grad graph Inductor lowered: one per compile (``[frame/compile]``), or
several when a backend compiles pieces of one Dynamo graph (vLLM's piecewise split).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compile_checks.errors import CompileChecksError


class ScanError(CompileChecksError, ValueError):
    """A path the scan cannot read as compile artifacts (the CLI exits 2: never a clean verdict)."""


class UnknownFormatError(ScanError):
    """The path is neither a TORCH_TRACE log, an Inductor debug folder nor a depyf / vLLM dump."""


class TruncatedTraceError(ScanError):
    """A structured-trace record whose payload is cut short or does not match its logged hash."""


@dataclass
class InputSource:
    """What the compile knew about graph input ``index``: Dynamo's source and its storage."""

    index: int
    name: str  # the Dynamo graph's placeholder name (``L_k_pools_0_``), else the post-grad one
    source: str | None = None  # ``L['k_pools'][0]`` (Dynamo's describe_source), when logged
    storage: int | None = None  # Dynamo's storage id: equal ids share one allocation
    storage_offset: int = 0


@dataclass
class GraphArtifacts:
    """One compiled graph's logged texts. ``post_grad`` None: the compile logged no post-grad graph."""

    origin: str  # the file or folder it was read from
    rank: int | None
    compile_id: str  # ``0/0`` (frame id / frame compile id), or the folder's name
    index: int = 0  # which post-grad graph of the compile (piecewise: one per piece)
    post_grad: str | None = None
    output_code: str | None = None
    output_file: str | None = None  # the output code's file, as logged (a served artifact: the cache's module)
    dynamo_graph: str | None = None
    aot_graph: str | None = None
    inputs: dict[str, InputSource] = field(default_factory=dict)  # post-grad placeholder -> its source
    notes: list[str] = field(default_factory=list)
    scope: str = ""  # the PATH it came from, when a scan reads several
    # the caches that served this compile (compile_checks.vocab.CacheServed values); empty: compiled here
    served_from: tuple[str, ...] = ()
    # ``fail_type: fail_reason`` of a compile Dynamo logged as failed (its graph never ran compiled); None: it did not
    compile_failure: str | None = None

    @property
    def label(self) -> str:
        scope = f"{self.scope} " if self.scope else ""
        rank = f"rank{self.rank} " if self.rank is not None else ""
        piece = f" graph {self.index}" if self.index else ""
        return f"{scope}{rank}[{self.compile_id}]{piece}"


__all__ = ["GraphArtifacts", "InputSource", "ScanError", "TruncatedTraceError", "UnknownFormatError"]
