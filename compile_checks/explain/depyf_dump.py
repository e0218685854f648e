"""depyf's dumps, guarded: a dump is an artifact, and depyf failing never fails a check.

``depyf.prepare_debug`` (0.20) does two things that can raise on real code:

* its **bytecode hook** (``DebuggableHook``) decompiles every code object dynamo transforms and hands
  dynamo the decompiled-and-recompiled code instead. An error there other than its own
  ``DecompilationError`` (a ``RecursionError`` from ``compile()`` deep in a stack, a lock error)
  becomes dynamo's error, and ``torch.compile`` of the user's model fails.
* on exit it writes ``full_code_for_<fn>.py`` by walking every compiled code object and, recursively,
  each resume function its transformed code calls (``DynamoOptimizationResult`` ->
  ``CacheResult`` -> ``DynamoOptimizationResult`` ...). A frame with many sequential graph breaks
  (``.item()``, ``.tolist()``: every resume function calls the next) is a chain that deep, and around
  200 of them exceed Python's recursion limit: ``RecursionError`` from the ``with`` block's exit.

:class:`DepyfDump` runs ``prepare_debug`` with its hook wrapped so that it only *writes*
(``__transformed_code_*`` files): dynamo keeps running its own bytecode, never depyf's decompiled
copy, so the checked run is the run without dumps; any error of the hook, or of the exit, is
recorded in :attr:`DepyfDump.failures` (with depyf's error) and the check goes on. What depyf
prints while failing (a ``dis`` listing and a traceback per code it cannot decompile) is
captured, not printed. depyf's FX-graph and kernel files are written by other patches and are
there either way; whatever is missing is written from the check's own records
(:func:`compile_checks.explain.dumps.write_fallback_files`).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable, Iterator
from types import CodeType
from typing import Any
from unittest import mock


def _error_text(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class DepyfDump:
    """``depyf.prepare_debug(dump_dir)`` whose failures are recorded, never raised (see the module doc)."""

    def __init__(self, dump_dir: str) -> None:
        self.dump_dir = dump_dir
        self.failures: list[str] = []

    def _guard(self, hook: Callable[[CodeType, CodeType], Any]) -> Callable[[CodeType, CodeType], None]:
        def guarded(code: CodeType, new_code: CodeType) -> None:
            printed = io.StringIO()
            try:
                with contextlib.redirect_stderr(printed), warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    hook(code, new_code)
            except Exception as e:  # RecursionError, OSError, ...: the dump's problem, not the check's
                self.failures.append(f"depyf's bytecode hook failed on `{code.co_name}`: {_error_text(e)}")
                return None
            if any("problem when decompiling" in str(w.message) for w in caught):
                self.failures.append(
                    f"depyf could not decompile `{code.co_name}` (DecompilationError): its "
                    "__transformed_code_* file is missing"
                )
            return None  # dynamo keeps its own bytecode: the checked run never runs depyf's decompiled copy

        return guarded

    @contextlib.contextmanager
    def active(self) -> Iterator[DepyfDump]:
        """Inside: depyf writes its files; on exit its ``full_code_*`` files (failures recorded)."""
        import depyf
        import torch._dynamo.convert_frame as convert_frame

        register = convert_frame.register_bytecode_hook
        session = depyf.prepare_debug(self.dump_dir)
        with (
            warnings.catch_warnings(),
            mock.patch.object(convert_frame, "register_bytecode_hook", lambda hook: register(self._guard(hook))),  # type: ignore[arg-type]  # a BytecodeHook
        ):
            # depyf warns once per prepare_debug that code should run several times; we know
            warnings.filterwarnings("ignore", message=".*You are trying to debug `torch.compile`.*")
            session.__enter__()
        try:
            yield self
        finally:
            self._close(session)

    def _close(self, session: contextlib.AbstractContextManager[Any]) -> None:
        """depyf's exit (its ``full_code_*`` files); an error there is a dump failure."""
        printed = io.StringIO()
        try:
            with contextlib.redirect_stderr(printed), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                session.__exit__(None, None, None)
        except Exception as e:
            self.failures.append(f"depyf failed writing its full_code_* files on exit: {_error_text(e)}")
            from depyf.explain.global_variables import data

            data["is_inside_prepare_debug"] = False  # depyf's finally stopped before resetting it


__all__ = ["DepyfDump"]
