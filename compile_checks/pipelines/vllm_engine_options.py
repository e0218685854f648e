"""What the engine gate refuses before vLLM starts, and how a failure of vLLM's own reads: torch-free.

* :func:`refuse_uncompiled`: ``enforce_eager`` or compilation mode NONE in ``vllm.LLM``'s options means
  vLLM's model runner compiles nothing; there is nothing to gate (a usage error, exit 2).
* :class:`EngineError`: vLLM refused the configuration or crashed while building or generating
  (exit 4), with one line of why (:func:`one_line`); the original exception is its ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compile_checks.errors import UsageError
from compile_checks.pipelines.vllm_env import VllmPipelineError

# vLLM's CompilationMode.NONE (an int enum; its name where a config spells it out)
_MODE_NONE = (0, "NONE", "none")


class EngineError(VllmPipelineError):
    """vLLM's engine refused the configuration or crashed (building it, or generating)."""


def refuse_uncompiled(llm_kwargs: Mapping[str, Any]) -> None:
    """A UsageError where the options make vLLM compile nothing (``enforce_eager``, compilation mode NONE)."""
    if llm_kwargs.get("enforce_eager"):
        raise UsageError("enforce_eager=True: vLLM runs the model eagerly and compiles nothing, so nothing is gated")
    config = llm_kwargs.get("compilation_config")
    mode = config.get("mode", config.get("level")) if isinstance(config, Mapping) else config
    mode = getattr(mode, "name", mode)
    if mode is not None and not isinstance(mode, bool) and mode in _MODE_NONE:
        raise UsageError("compilation mode NONE: vLLM compiles nothing, so nothing is gated")


def one_line(e: BaseException, limit: int = 400) -> str:
    """``Type: message`` on one line: the message's first non-empty lines (a validation error's reason is on its
    third), joined, cut at ``limit`` characters."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = f"{type(e).__name__}: " + "; ".join(lines[:3])
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["EngineError", "one_line", "refuse_uncompiled"]
