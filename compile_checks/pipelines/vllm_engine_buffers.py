"""The buffers Inductor's generated code fills from a pool: every one, whatever its size.

The engine gate's cross-check reads each compiled graph's wrapper code (the CPU backend's Python wrapper):

* its kernels and which of their arguments each only reads (``async_compile.cpp_pybinding([...])``:
  ``const`` pointers) or writes;
* its static allocations (``bufN = empty_strided_cpu((16, 2, 128, 64), ...)``; a buffer placed in a dead
  one's memory, ``# reuse``); a buffer of a symbolic size (per token: an activation) is never a pool's;
* each kernel call: a static buffer it writes while it reads a pool's graph input (``argN_1``, or a
  ``reinterpret_tensor`` view of it) is filled from that pool: a copy of the whole cache, a K or V half,
  a block or a window alike.

A graph input is a pool's when the check matched the tensor the compiled graph received at that position
to a named pool (:func:`pool_inputs`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

_KERNEL = re.compile(r"^(\w+) = async_compile\.cpp_pybinding\(\[([^\]]*)\]", re.M)
_UNPACK = re.compile(r"^\s*((?:\w+, )*\w+),? = args$", re.M)
_ALLOC = re.compile(r"^\s*(\w+) = empty_strided_\w+\(\(([^)]*)\), \([^)]*\), (?:device=[^,]+, )?torch\.(\w+)\)", re.M)
_REUSE = re.compile(r"^\s*(\w+) = (?:reinterpret_tensor\((\w+), \(([^)]*)\)[^;]*|(\w+)); del \w+  # reuse", re.M)
_ALIAS = re.compile(r"^\s*(\w+) = reinterpret_tensor\((\w+), .*# alias$", re.M)
_CALL = re.compile(r"^\s*(\w+)\((.*)\)\s*$", re.M)


@dataclass(frozen=True)
class FilledBuffer:
    """A buffer the generated code fills from a pool, per call."""

    name: str
    nbytes: int
    pool: str
    kernel: str
    origins: tuple[str, ...] = ()  # the post-grad nodes Inductor computed it from

    def describe(self) -> str:
        if not self.pool:
            return f"{self.name} ({self.nbytes} B, the size of a pool or of a copy)"
        nodes = f", from node {', '.join(self.origins)}" if self.origins else ""
        return f"{self.name} ({self.nbytes} B) filled from {self.pool} by {self.kernel}{nodes}"


def pool_inputs(signature: Sequence[Any], match: Any) -> dict[int, str]:
    """Graph input position -> pool name, from one call's inputs (``match(ref) -> pool | None``)."""
    out: dict[int, str] = {}
    for i, ref in enumerate(signature):
        pool = match(ref) if ref is not None else None
        if pool is not None:
            out[i] = pool
    return out


def pool_filled_buffers(
    code: str, pools_at: Mapping[int, str], origins: Mapping[str, frozenset[str]] | None = None
) -> list[FilledBuffer]:
    """Every static buffer ``code`` writes in a kernel call that reads a pool's graph input."""
    unpack = _UNPACK.search(code)
    if unpack is None or not pools_at:
        return []
    names = [n.strip() for n in unpack.group(1).split(",")]
    pool_of = {names[i]: pool for i, pool in pools_at.items() if i < len(names)}
    kernels = {name: [t.strip().strip("'\"").startswith("const") for t in types.split(",")] for name, types in
               _KERNEL.findall(code)}  # fmt: skip
    sizes = _static_sizes(code)
    alias = dict(_ALIAS.findall(code))

    def root(arg: str) -> str:
        m = re.match(r"\s*(?:reinterpret_tensor\()?(\w+)", arg)
        name = m.group(1) if m else arg.strip()
        while name in alias:
            name = alias[name]
        return name

    out: dict[str, FilledBuffer] = {}
    for kernel, argtext in _CALL.findall(code):
        const = kernels.get(kernel)
        if const is None:
            continue
        args = [root(a) for a in _split_args(argtext)]
        read = [pool_of[a] for a, c in zip(args, const, strict=False) if c and a in pool_of]
        if not read:
            continue
        for a, c in zip(args, const, strict=False):
            if not c and a in sizes and a not in out:
                found = tuple(sorted((origins or {}).get(a, ())))
                out[a] = FilledBuffer(a, sizes[a], read[0], kernel, found)
    return list(out.values())


def _static_sizes(code: str) -> dict[str, int]:
    """Bytes of every buffer the code allocates (or places in a dead one's memory) with a static shape."""
    itemsize: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for name, dims, dtype in _ALLOC.findall(code):
        itemsize[name] = getattr(torch, dtype).itemsize
        n = _numel(dims)
        if n is not None:
            sizes[name] = n * itemsize[name]
    for new, old_view, dims, old in _REUSE.findall(code):
        base = old_view or old
        if base not in itemsize:
            continue
        itemsize[new] = itemsize[base]
        n = _numel(dims) if old_view else None
        if n is not None:
            sizes[new] = n * itemsize[base]
        elif not old_view and base in sizes:
            sizes[new] = sizes[base]
    return sizes


def _numel(dims: str) -> int | None:
    parts = [d.strip() for d in dims.split(",") if d.strip()]
    if not all(p.isdigit() for p in parts):
        return None
    return math.prod(int(p) for p in parts)


def _split_args(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


@dataclass(frozen=True)
class GeneratedBuffers:
    """One compiled graph's pool traffic: the check's copies beside the buffers Inductor's code fills from a pool."""

    region: int
    check_copies: int
    check_bytes: int
    code_buffers: int | None  # None: the generated code could not be read (no wrapper)
    code_bytes: int | None
    buffers: tuple[FilledBuffer, ...] = ()  # each buffer counted, named

    @property
    def agrees(self) -> bool:
        return (self.check_copies, self.check_bytes) == (self.code_buffers, self.code_bytes)

    def disagreement(self) -> str:
        named = "; ".join(b.describe() for b in self.buffers)
        return (
            f"region {self.region}: the check counts {self.check_copies} pool copies ({self.check_bytes} B), "
            f"Inductor's generated code fills {self.code_buffers} buffers from the pools ({self.code_bytes} B)"
            + (f": {named}" if named else "")
        )


def cross_check(check: Any, pool_sizes: Sequence[int]) -> list[GeneratedBuffers]:
    """Per compiled region: the check's pool copies beside the buffers its generated code fills from a pool
    (:func:`pool_filled_buffers`) or allocates at a pool's or a reported copy's exact size (static shapes)."""
    from compile_checks.check.runtime_pools import match_pool

    report = check.report
    pools = check.pools or {}
    out: list[GeneratedBuffers] = []
    for region in check.probe.regions:
        copies = [c for c in report.clones if c.region == region.index]
        sizes = set(pool_sizes) | {c.nbytes for c in copies}
        found: dict[str, FilledBuffer] = {}
        readable = bool(region.inner) and all(inner.generated_code for inner in region.inner)
        for inner in region.inner:
            code = inner.generated_code
            signatures = inner.recorder.signatures if inner.recorder is not None else []
            pools_at = pool_inputs(signatures[0], lambda ref: match_pool(ref, ref, pools)) if signatures else {}
            origins = {k: v.origins for k, v in (inner.lowered or {}).items()}
            for b in pool_filled_buffers(code, pools_at, origins):
                found[b.name] = b
            for name, nbytes in _static_sizes(code).items():
                if nbytes in sizes and name not in found:
                    found[name] = FilledBuffer(name, nbytes, "", "")
        buffers = tuple(found.values())
        count: int | None = len(buffers) if readable else None
        code_bytes: int | None = sum(x.nbytes for x in buffers) if readable else None
        check_bytes = sum(c.nbytes for c in copies)
        out.append(GeneratedBuffers(region.index, len(copies), check_bytes, count, code_bytes, buffers))
    return out


__all__ = ["FilledBuffer", "GeneratedBuffers", "cross_check", "pool_filled_buffers", "pool_inputs"]
