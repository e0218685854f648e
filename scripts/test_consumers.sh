#!/usr/bin/env bash
# Real KV-cache consumers from the package index (requirements/consumers.txt: diffusers' AnyFlow FAR, torchtune's
# KVCache) gated on CPU: installed with --no-deps into .venv-consumers/site (nothing changes in VENV), then
# tests/test_pypi_consumers.py with COMPILE_CHECKS_REQUIRE_CONSUMERS=1, so a missing package fails, never skips.
#
# Usage: scripts/test_consumers.sh [VENV]   (default: .venv, the locked environment scripts/setup_env.sh builds)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${1:-.venv}"
site=".venv-consumers/site"
start=$SECONDS
if [ ! -f "$site/.installed" ] || ! cmp -s requirements/consumers.txt "$site/.installed"; then
  rm -rf "$site"
  "$venv/bin/python" -m pip install --quiet --no-deps --target "$site" -r requirements/consumers.txt
  cp requirements/consumers.txt "$site/.installed"
fi
echo "[consumers] $site ready in $((SECONDS - start)) s"
export PYTHONPATH="$root:$root/$site" PYTHONHASHSEED=0 COMPILE_CHECKS_REQUIRE_CONSUMERS=1
"$venv/bin/python" -m pytest -q -n 0 -p no:cacheprovider --durations=5 tests/test_pypi_consumers.py
echo "[consumers] done in $((SECONDS - start)) s"
