"""One g++ build per distinct Inductor C++ kernel in a test session, shared by the xdist workers.

Why: the checks compile with ``force_disable_caches`` (a graph-cache hit skips the passes a
verdict reads), under which Inductor gives each compile a fresh cache folder and builds every
kernel again: in the suite, 126 of 275 g++ runs (170 s of 303 s) rebuilt a binary another test had
already built. Inductor names each object / library after a hash of its source text and its
compile command line, so a binary stored under that name is the one g++ would build again. Only
the g++ step is skipped: dynamo, AOT, the post-grad passes, reinplacing and codegen all still run,
and the generated code a verdict is checked against is unchanged.

Not for the product: a store that outlives the session would also outlive a compiler or header
change, which the name does not hash.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

STORE_ENV = "TESTS_KERNEL_STORE"  # the store's folder; "0": no store

# Inductor's code-cache key: "c" + 51 base32 digits of sha256(source || flags) (torch/_inductor/cache_key.py).
# A build whose target is not named by one (the header preprocessor's fixed "header.i") is never stored.
_HASHED_NAME = re.compile(r"c[a-z2-7]{51}\.")


def _stored_build(store: Path, build: Callable[[Any], None]) -> Callable[[Any], None]:
    """``CppBuilder.build`` that copies a stored binary of the same name, or builds and stores it."""

    def build_or_reuse(builder: Any) -> None:
        target = Path(builder.get_target_file_path())
        if not _HASHED_NAME.match(target.name):
            build(builder)
            return
        stored = store / target.name
        if stored.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(stored, target)
            return
        build(builder)
        if target.is_file():  # copy, then rename: another worker never reads a half-written binary
            fd, partial = tempfile.mkstemp(dir=store, prefix=f".{target.name}.")
            os.close(fd)
            shutil.copyfile(target, partial)
            os.replace(partial, stored)

    build_or_reuse.__wrapped__ = build  # type: ignore[attr-defined]  # the g++ build, for tests of the store
    return build_or_reuse


def from_environment() -> contextlib.AbstractContextManager[None]:
    """The store a test's subprocess inherits from the session (``STORE_ENV``), or none."""
    folder = os.environ.get(STORE_ENV, "0")
    return contextlib.nullcontext() if folder == "0" else kernel_store(Path(folder))


@contextlib.contextmanager
def kernel_store(store: Path) -> Iterator[None]:
    """Within the block, Inductor's C++ builds in this process go through ``store``."""
    from torch._inductor.cpp_builder import CppBuilder

    store.mkdir(parents=True, exist_ok=True)
    build = CppBuilder.build
    CppBuilder.build = _stored_build(store, build)  # type: ignore[method-assign]
    try:
        yield
    finally:
        CppBuilder.build = build  # type: ignore[method-assign]
