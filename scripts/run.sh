#!/usr/bin/env bash
# The main command (README, "This repository"): set up .venv from nothing, run the compile gate over the
# clean scenarios, then write the traffic report (CSV, Markdown, HTML, PNG) to out/report.
# Extra arguments go to the gate, e.g. `bash scripts/run.sh --scenario fused`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
status=0
.venv/bin/python -m compile_checks gate "$@" || status=$?
.venv/bin/python -m reports --out out/report
echo "[run] report written to out/report/ (traffic.md, traffic.csv, traffic.html, PNG plot)"
exit "$status"
