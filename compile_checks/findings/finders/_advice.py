"""Cause and fix of each run finding kind whose cause is known from its kind alone (the docs' words:
docs/getting-started.md "Writes the compiler cannot see", docs/guides/output.md)."""

from __future__ import annotations

from compile_checks.vocab import FindingKind

_DECLARE = (
    'declare every tensor {op} writes in its schema: torch.library.custom_op(..., mutates_args=("kv_cache", ...)) '
    "or '(a!)' in a torch.library schema (docs/getting-started.md, 'Writes the compiler cannot see')"
)

# kind -> (cause, fix); ``{op}`` in a fix is the finding's op ("the op" when it names none)
ADVICE: dict[FindingKind, tuple[str, str]] = {
    FindingKind.LOST_WRITE: (
        "the compiled run never wrote what eager wrote: a write whose output nobody uses is dead code to AOT "
        "autograd and Inductor, so an op that mutates the cache without declaring it is dropped",
        _DECLARE,
    ),
    FindingKind.UNDECLARED_WRITE: (
        "an opaque op wrote a named pool its schema does not declare as mutated: Inductor may drop, reorder or "
        "CSE around a write it does not know of",
        _DECLARE,
    ),
    FindingKind.UNANCHORED_WRITE_OP: (
        "the KV-update op's dummy output feeds nothing Inductor must keep, so codegen may drop the op",
        "consume the update's output in the attention op that reads the cache (vLLM's "
        "unified_attention_with_output pattern), or declare the write in the op's schema",
    ),
    FindingKind.DROPPED_WRITE_OP: (
        "the KV-update op is in the post-grad graph but not in Inductor's generated code: the write was dropped",
        "anchor the update's output in an op Inductor keeps, or declare the write in the op's schema",
    ),
    FindingKind.DIVERGED_STATE: (
        "the compiled call and its eager graph did not start from the same state (a write the check could not "
        "undo, or state kept outside the tensors the op receives)",
        "keep the op's state in the tensors it receives, so the check can compare compiled with eager",
    ),
    FindingKind.TOO_MANY_RECOMPILES: (
        "a guard failed on every call (a shape or value the compiled function specialises on)",
        "mark the varying dimension dynamic, or raise Case(max_recompiles=N) if the recompiles are expected",
    ),
    FindingKind.RECOMPILE_LIMIT_HIT: (
        "dynamo's recompile_limit refused a compile (one compiled function per block of the same class)",
        "raise torch._dynamo.config.recompile_limit to the number of blocks, or compile the blocks as one region",
    ),
}


# a lost write by an ATen op: no undeclared mutation (ATen schemas declare theirs): the generated code is wrong
ATEN_LOST_WRITE = (
    "the compiled code did not write what the eager graph wrote with an ATen op (whose schema declares its "
    "writes): a miscompile, not a missing declaration",
    "reproduce it standalone (compile-checks repro TARGET --case NAME) and report it upstream",
)


def advice(kind: FindingKind, op: str | None) -> tuple[str | None, str | None]:
    """The cause and fix of a finding of ``kind`` made by ``op`` (``{op}`` in the fix filled in)."""
    cause, fix = (
        ATEN_LOST_WRITE
        if kind == FindingKind.LOST_WRITE and (op or "").startswith("aten::")
        else (ADVICE.get(kind, (None, None)))
    )
    return cause, fix.replace("{op}", op or "the op") if fix else None


__all__ = ["ADVICE", "ATEN_LOST_WRITE", "advice"]
