#!/usr/bin/env bash
# The README's test command: set up .venv from nothing, run the unit + end-to-end tests,
# then the compile gate (exits 1 if a pool clone survives in a clean scenario) and the
# traffic report against the committed baseline (exits 1 if clones or clone bytes grew).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
export PYTHONHASHSEED=0 OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
echo "[test] pytest"
.venv/bin/python -m pytest -q "$@"
echo "[test] compile gate"
.venv/bin/python -m compile_checks gate
echo "[test] traffic report vs reports/baseline.json"
.venv/bin/python -m reports --out out/report --baseline reports/baseline.json
