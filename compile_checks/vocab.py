"""The check's fixed vocabularies, as enums (torch-free: the CLI parses them before torch loads).

``StrEnum`` members equal their strings, so JSON, JUnit and user code that compares with
``"vllm"`` keep working; new code names the member.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class Pipeline(StrEnum):
    """How a case is compiled (see :mod:`compile_checks.pipelines`)."""

    # torch.compile(backend=<the check's instrumented Inductor>), Inductor defaults
    STOCK = "stock"
    # as vLLM 0.33 compiles on this platform: its CompilationConfig's Inductor config, v1
    # functionalization, @support_torch_compile modules through vLLM's own wrapper
    VLLM = "vllm"
    # a CPU simulation of vLLM's GPU path (VllmBackend graph splitting, PostGradPassManager)
    VLLM_PIECEWISE = "vllm-piecewise"


class Functionalization(StrEnum):
    """Which ``auto_functionalized`` HOP AOT autograd emits for a mutating custom op."""

    V1 = "v1"
    V2 = "v2"


class CopyKind(StrEnum):
    """What kind of pool-sized copy survived into the final graph."""

    # a custom op's mutated argument cloned by functionalization and copied back by the epilogue
    FUNCTIONALIZATION_CLONE = "functionalization_clone"
    # a plain ATen write (index_put, scatter, copy_, ...) left functional: copy in, write, copy back
    ATEN_WRITE_COPY = "aten_write_copy"
    # an out-of-place collective on a pool (``_c10d_functional.all_reduce(pool)`` written back): Inductor
    # lowers it as clone + ``all_reduce_`` on the clone, then copies the result back
    COLLECTIVE_COPY = "collective_copy"
    # a named pool the region replaced by a new tensor (an out-of-place update the program rebinds,
    # ``self.keys = self.keys.index_copy(...)``): the whole pool copied into a fresh buffer every call
    POOL_REPLACED = "pool_replaced"


class Cause(StrEnum):
    """Why Inductor's reinplace pass refused to write a buffer in place (compile_checks.explain)."""

    # another mutated argument of the same call on the same storage was written in place first
    SHARED_STORAGE = "shared_storage"
    # a view of the buffer is read after the write, before the copy_ epilogue (often a pass moved the read there)
    READ_AFTER_WRITE = "read_after_write"
    # a graph input with no copy_ epilogue, or a view no layout-preserving copy_ writes back
    VIEW_NOT_WRITTEN_BACK = "view_not_written_back"
    # under v1 auto_functionalized (vLLM's setting) the op mutates a view of a graph input (kv[0] taken inside the
    # region): Inductor re-inplaces a view of an input only through its in-place-able ATen ops, so it clones it
    VIEW_OF_INPUT_V1 = "view_of_input_v1"
    # the graph output uses the buffer after the write
    OUTPUT_ALIAS = "output_alias"
    # two or more ATen writes through views of one graph input in one region, one of them into part of a view
    # (K into ``kv[0, :n]``, then V into ``kv[1, :n]``): only the last write's result is copied back into the
    # input, so Inductor keeps each earlier one functional (``should_reinplace_scatter``), a copy of the whole
    # input, whatever it writes (``[:0]`` included); whole-view writes (``kv[0] = k; kv[1] = v``) are one pass
    CHAINED_WRITES = "chained_writes"
    # anything else: the replay's reason plus Inductor's own log line
    OTHER = "other"


class WriteKind(StrEnum):
    """How a copied pool is written in the compiled region: what a fix may advise (compile_checks.explain)."""

    # a mutating custom op (``auto_functionalized``): Inductor reinplaces its base inputs, views taken inside
    # the region included (under auto_functionalized_v2)
    OPAQUE_OP = "opaque_op"
    # plain ATen writes (``index_put_``, ``cache[a:b] = x``): written in place only into a tensor the region
    # receives as an input and copies back whole; a view taken inside the region is copied
    ATEN = "aten"


class ErrorKind(StrEnum):
    """Why a planned case did not reach a verdict (the gate's exit code follows it)."""

    COMPILE = "compile"  # the case failed to compile or run under the check (exit 4)
    UNWRITABLE = "unwritable"  # an output path (dumps) cannot be written (exit 3)
    USAGE = "usage"  # the case's own naming is wrong: a pool named twice or overlapping another (exit 2)


PIPELINES: tuple[str, ...] = tuple(Pipeline)
FUNCTIONALIZATIONS: tuple[str, ...] = tuple(Functionalization)
CAUSES: tuple[str, ...] = tuple(Cause)

__all__ = [
    "CAUSES",
    "FUNCTIONALIZATIONS",
    "PIPELINES",
    "Cause",
    "CopyKind",
    "ErrorKind",
    "Functionalization",
    "Pipeline",
    "WriteKind",
]


class Mode(StrEnum):
    """How much of Inductor a run compiles: resolved once, from ``--full`` / ``--analysis-only`` and
    ``[tool.compile_checks] full``, by :mod:`compile_checks.cli`; everything downstream reads it."""

    # verdicts from the post-grad graph (no C++ codegen); the built-in gate adds its codegen smoke
    ANALYSIS = "analysis"
    # the same verdicts, no codegen anywhere (the gate drops its smoke; the report's default)
    ANALYSIS_ONLY = "analysis-only"
    # every case compiled fully (C++ codegen): generated code, Inductor's kernel-byte estimate
    FULL = "full"

    @property
    def analysis_only(self) -> bool:
        """Cases stop after Inductor's post-grad passes (``run_case(analysis_only=...)``)."""
        return self is not Mode.FULL

    @property
    def codegen_smoke(self) -> bool:
        """The built-in gate adds its small fully compiled smoke set."""
        return self is Mode.ANALYSIS


class ExitCode(IntEnum):
    """The CLI's exit codes, every subcommand alike (the table is in :mod:`compile_checks.cli`)."""

    CLEAN = 0
    NOT_MET = 1
    USAGE = 2
    UNWRITABLE = 3
    COMPILE = 4
    MISMATCH = 5
    INTERRUPTED = 130


__all__ += ["ExitCode", "Mode"]


class WriteProblem(StrEnum):
    """What the write checks found (compile_checks.check.writes): a pool write the compiled run lost or hid."""

    # a compiled call left elements of a named pool different from its graph run eagerly (a dropped or wrong write)
    LOST_WRITE = "lost_write"
    # an opaque op wrote a named pool while its schema declares no mutation of it
    UNDECLARED_WRITE = "undeclared_write"
    # vLLM's side-effect KV update (recognised): its write, attributed to the forward-context pool; not a failure
    SIDE_EFFECT_WRITE = "side_effect_write"
    # vLLM's KV-update op is in the post-grad graph but not in Inductor's generated code
    DROPPED_WRITE_OP = "dropped_write_op"
    # vLLM's KV-update op's dummy output feeds nothing Inductor must keep (codegen may drop it)
    UNANCHORED_WRITE_OP = "unanchored_write_op"
    # a compiled call and its eager graph did not start from the same state (a write the check could not
    # undo, or an op keeping state outside the tensors it is given): never blamed as a lost write
    DIVERGED_STATE = "diverged_state"


class CompileProblem(StrEnum):
    """What the recompile count found (compile_checks.check.recompiles)."""

    # a compiled function was compiled more times than Case(max_recompiles=N) allows
    TOO_MANY_RECOMPILES = "too_many_recompiles"
    # dynamo refused a compile for torch._dynamo.config.recompile_limit (a per-block compile of more
    # blocks of one class than the limit): raised under fullgraph=True, else ran eagerly
    RECOMPILE_LIMIT_HIT = "recompile_limit_hit"


__all__ += ["CompileProblem", "WriteProblem"]


def pipeline_named(value: str, owner: str, error: type[Exception] = ValueError) -> Pipeline:
    """``value`` as a :class:`Pipeline`, or ``error`` naming ``owner`` (``Case 'split'``) and the choices:
    the one wording every declared case (``Case``, ``LazyCase``, ``RankedCase``) validates its pipeline with."""
    try:
        return Pipeline(value)
    except ValueError:
        raise error(f"{owner}: pipeline {value!r} is not one of the pipelines {', '.join(PIPELINES)}") from None


__all__ += ["pipeline_named"]


class BlindSpot(StrEnum):
    """What the check could not see into (compile_checks.check.graph.blind_spots): it fails the case unless allowed."""

    # Inductor compiled no graph through the check's inner compile
    NO_INNER_GRAPH = "no_inner_graph"
    # a graph Inductor lowers, but the check's post-grad hook never saw it (a cache hit, a bypassing compile path)
    NO_POST_GRAD = "no_post_grad"
    # a backward graph: copies made in a backward pass are not analysed
    BACKWARD = "backward"
    # a mutating op inside a higher-order-op subgraph
    HOP_SUBGRAPH = "hop_subgraph"
    # the compiled graph exposes no callable whose inputs can be attributed
    NO_CALLABLE = "no_callable"


class FailureType(StrEnum):
    """What made a case fail (the JUnit ``<failure type=...>``), one word a CI page can filter on."""

    # a surviving pool copy where the case expects none, or a negative control that stopped cloning
    CLONE = "clone"
    # part of a compiled region the check could not analyse (compile_checks.vocab.BlindSpot)
    BLIND_SPOT = "blind_spot"
    # the check could not decide for another reason: an error, a lost / undeclared write, too many recompiles
    CHECK_ERROR = "check_error"
    # every verdict met, but the compiled run differs from the case's eager reference
    MISMATCH = "mismatch"


__all__ += ["BlindSpot", "FailureType"]


class Phase(StrEnum):
    """Where a region's compile time went (``CloneReport.region_phase_seconds``, ``gate --timings``)."""

    # dynamo tracing the frame, from its compile start to the backend call
    DYNAMO = "dynamo"
    # AOT autograd (functionalization, partitioning) and Inductor's pre-grad / joint passes
    AOT = "aot"
    # compile_fx_inner before the post-grad passes (graph and fake-tensor preparation)
    INDUCTOR_PREP = "inductor_prep"
    # Inductor's post-grad passes (reinplacing among them)
    POST_GRAD = "post_grad"
    # lowering and C++ codegen after the post-grad passes (a full compile only)
    CODEGEN = "codegen"
    # analysis-only: wrapping the post-grad FX graph to run it instead of generated code (no codegen runs)
    FX_RUNNER = "fx_runner"


PHASES: tuple[str, ...] = tuple(Phase)
__all__ += ["PHASES", "Phase"]


class RankStart(StrEnum):
    """How a rank's process began (its JSON's ``start``): see ``compile_checks.ranks.forked``."""

    FRESH = "fresh"  # ``python -m compile_checks.ranks.worker``: nccl, a CUDA host, COMPILE_CHECKS_RANKS_FORK=0
    FORKED = "forked"  # forked from the server that imported torch, this package and vLLM once (gloo, no CUDA)


__all__ += ["RankStart"]


class CacheProblem(StrEnum):
    """What a run against a warm Inductor cache found (``gate --inductor-cache``: compile_checks.gate.warm_cache)."""

    # the artifact the cache served copies other bytes per call than a cold compile of the same case
    CACHE_DIVERGENCE = "cache_divergence"
    # a graph the caches served was compiled for other input aliasing than the inputs it runs on (scan)
    CACHE_ALIASING = "cache_aliasing"


class CacheServed(StrEnum):
    """Which of torch's compile caches served a logged graph: the TORCH_TRACE artifact each hit logs."""

    AOTAUTOGRAD = "aotautograd_cache_hit"  # torch/_functorch/_aot_autograd/autograd_cache.py
    FX_GRAPH = "fx_graph_cache_hit"  # torch/_inductor/codecache.py (also logged under an AOTAutograd hit)


__all__ += ["CacheProblem", "CacheServed"]


class EagerCompared(StrEnum):
    """What ``eager_match`` compared eager with: analysis-only runs the post-grad FX graph, not Inductor's
    generated code, so a miscompile in codegen (a wrong offset handed to an op) is not in that comparison."""

    POST_GRAD = "post-grad graph, not generated code"
    GENERATED = "generated code"


__all__ += ["EagerCompared"]


class FindingKind(StrEnum):
    """Everything the check can say about a case: the ``kind`` of one :class:`compile_checks.findings.Finding`.

    Copy kinds repeat :class:`CopyKind`'s values and write kinds :class:`WriteProblem`'s, so a finding's kind
    compares equal to the value the older records carried.
    """

    # a surviving copy of (part of) a pool (CopyKind's values)
    FUNCTIONALIZATION_CLONE = "functionalization_clone"
    ATEN_WRITE_COPY = "aten_write_copy"
    COLLECTIVE_COPY = "collective_copy"
    POOL_REPLACED = "pool_replaced"
    # a pool- or window-sized buffer the program itself asks for (a roll, a gather of the window): traffic,
    # not a reinplacing failure; reported, failing only where the case or the gate asks (fail_on_program_copies)
    PROGRAM_COPY = "program_copy"
    # a pool a region reads folded into a constant (freezing=True: a ``_frozen_param`` of the pool's shape)
    POOL_FOLDED = "pool_folded"
    # write problems (WriteProblem's values)
    LOST_WRITE = "lost_write"
    UNDECLARED_WRITE = "undeclared_write"
    SIDE_EFFECT_WRITE = "side_effect_write"
    DROPPED_WRITE_OP = "dropped_write_op"
    UNANCHORED_WRITE_OP = "unanchored_write_op"
    DIVERGED_STATE = "diverged_state"
    # compile problems (CompileProblem's values)
    TOO_MANY_RECOMPILES = "too_many_recompiles"
    RECOMPILE_LIMIT_HIT = "recompile_limit_hit"
    # a warm cache served another artifact than a cold compile (CacheProblem's values)
    CACHE_DIVERGENCE = "cache_divergence"
    CACHE_ALIASING = "cache_aliasing"
    # a named pool no compiled region received
    POOL_NOT_RECEIVED = "pool_not_received"
    # the generated code fills buffers from a pool that the check's copies do not account for (or the reverse):
    # the engine gate's cross-check of a region, each buffer named
    GENERATED_CODE_DISAGREES = "generated_code_disagrees"
    # a region (or op) the check could not analyse (a BlindSpot), or could not decide for another reason
    UNDECIDED = "undecided"
    # the compiled run differs from eager (``verify``)
    MISMATCH = "mismatch"
    # a caveat: never fails by itself
    NOTE = "note"


class FinderSource(StrEnum):
    """Where a finder reads what it finds (``compile_checks.findings.registry``)."""

    GRAPH = "graph"  # the post-grad graph and Inductor's generated code of each region
    RUN = "run"  # the compiled calls as they ran (the write check, recompiles, received pools)
    TRACE = "trace"  # a production TORCH_TRACE log (compile_checks.scan)


__all__ += ["FinderSource", "FindingKind"]
