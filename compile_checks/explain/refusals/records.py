"""What the replay of Inductor's reinplace rules returns: one :class:`Refusal` per cloned argument.

Apart from the rules because the culprit-pass recorder, the explanations and the dumps hold these
records without replaying anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compile_checks.vocab import Cause, WriteKind


@dataclass(frozen=True)
class Reader:
    """A node that uses the buffer after the write (or the graph output returning it)."""

    node: str
    op: str
    user_line: str | None = None
    wrapper_line: str | None = None  # the library function it read through (``gather_window``), if any


@dataclass(frozen=True)
class Refusal:
    """One mutated argument Inductor would not (or did not) write in place, and why."""

    cause: Cause
    node: str  # the functionalized op node (auto_functionalized* or a functional ATen write)
    op: str  # "ar_paging::paged_write", "aten::index_put"
    args: tuple[str, ...]  # the op's argument name(s) this buffer is passed as ("v_pool",)
    base: str  # graph node of the mutated tensor (a placeholder for a pool passed as input)
    placeholder: str | None  # the graph input under ``base`` (through views), if any
    detail: str  # the rule, in words
    user_line: str | None = None  # the user's line of the mutating call
    wrapper_line: str | None = None  # the library wrapper it went through (innermost), if any
    other_args: tuple[str, ...] = ()  # shared_storage: the argument already written in place
    other_base: str | None = None
    readers: tuple[Reader, ...] = ()  # read_after_write / output_alias
    inductor_log: str | None = None  # Inductor's own "Reinplace for ..." line when captured
    write_kind: WriteKind = WriteKind.OPAQUE_OP  # how the buffer is written: an opaque op or ATen writes


def op_label(target: Any) -> str:
    """``ns::name`` for an OpOverload, the HOP's name otherwise."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return str(schema.name)
    return getattr(target, "__name__", None) or str(target)


__all__ = ["Reader", "Refusal", "op_label"]
