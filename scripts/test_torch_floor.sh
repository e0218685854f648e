#!/usr/bin/env bash
# The lower bound of pyproject's torch range stays proven, not claimed: a venv of its own from
# requirements/lock-torch2.13.txt (the lock with torch==2.13.0+cpu, nothing else changed), then
#   1. the suite's fast subset: every test not marked `compile` (the Inductor-heavy ones run on
#      the lock's torch in scripts/test.sh),
#   2. tests/test_warm_cache.py (marked `compile`): what a warm Inductor cache serves on this torch, asserted
#      per torch version (its SPLIT_LOADS_FUSED table),
#   3. the built-in compile gate (all cases, stock + vLLM pipelines): it compiles with Inductor on
#      this torch, so the check's private Inductor hooks are exercised on the floor version.
#
# Usage: scripts/test_torch_floor.sh [VENV] [LOCK]   (default: .venv-torch2.13 requirements/lock-torch2.13.txt)
# Any other torch the same way, e.g. a lock with only the torch line changed to torch==2.14.1:
#   bash scripts/test_torch_floor.sh .venv-torch2.14.1 /tmp/lock-torch2.14.1.txt
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${1:-.venv-torch2.13}"
lock="${2:-requirements/lock-torch2.13.txt}"
bash scripts/setup_env.sh "$venv" "$lock"
export PYTHONHASHSEED=0 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
torch_version="$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
echo "[torch $torch_version] pytest -m 'not compile' ($venv)"
"$venv/bin/python" -m pytest -q -n "${PYTEST_WORKERS:-2}" -m "not compile" -p no:cacheprovider
echo "[torch $torch_version] the warm Inductor cache's behaviour on this torch (tests/test_warm_cache.py, marked compile)"
"$venv/bin/python" -m pytest -q -n 0 -p no:cacheprovider tests/test_warm_cache.py
echo "[torch $torch_version] compile gate (built-in cases, stock + vllm pipelines)"
"$venv/bin/compile-checks" gate --timings --junitxml "out/gate-$(basename "$venv")/junit.xml"
