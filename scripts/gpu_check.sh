#!/usr/bin/env bash
# One prepared check for a machine with a GPU (its CPU half runs anywhere):
#   1. trace the example engine (examples/engine: split + fused) under --pipeline vllm, compiled fully
#      on the GPU (CPU without one) with torch's structured trace on (tests/_scan_traces.py);
#   2. `compile-checks scan` the traces, and check the scan against the live check's verdicts
#      (same copies, bytes, verdict; `fused` is the negative control and must keep its copies);
#   3. the CUDA-graph hot-path tests (tests/test_hot_path.py: capture/replay of the commit step,
#      debug mode refused under capture, no host-to-device copy on the read path; skipped without a GPU);
#   4. a short summary; exit 0 only when every step passed.
#
# Usage: scripts/gpu_check.sh [OUT]   (default out/gpu-check; PYTHON=... picks the interpreter,
#        default .venv/bin/python of this repo, else python3)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/out/gpu-check}"
py="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$py" ]] || py="$(command -v python3)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
rm -rf "$out" && mkdir -p "$out"
cd "$root"

if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  device=cuda
else
  device=cpu
  export VLLM_TARGET_DEVICE="${VLLM_TARGET_DEVICE:-cpu}"  # a CUDA vLLM wheel on a host without a GPU
fi
echo "[gpu-check] device: $device ($("$py" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'))"
summary=()
failed=0
step() {  # step NAME RC
  if [[ "$2" == 0 ]]; then summary+=("ok    $1"); else summary+=("FAIL  $1 (exit $2)"); failed=1; fi
}

t0=$SECONDS
SCAN_TRACE_DEVICE=$device "$py" tests/_scan_traces.py "$out/traces" engine:split:vllm engine:fused:vllm \
  > "$out/live.jsonl" 2> "$out/trace.err"
step "trace: examples/engine split + fused, vllm pipeline, $device, full compile ($((SECONDS - t0)) s)" $?

t0=$SECONDS
"$py" -m compile_checks scan "$out/traces/engine-split-vllm" --junitxml "$out/scan-split.xml" > "$out/scan-split.txt"
step "scan split: clean, expected clean ($((SECONDS - t0)) s)" $?
cat > "$out/expect-copies.toml" <<'TOML'
[tool.compile_checks.scan]
expect_clean = false  # fused is the negative control: the scan must still see its copies
TOML
"$py" -m compile_checks scan "$out/traces/engine-fused-vllm" --config "$out/expect-copies.toml" --json \
  > "$out/scan-fused.json"
step "scan fused: copies found, as expected" $?
"$py" - "$out" <<'PY' > "$out/agreement.txt"
import sys
from pathlib import Path
sys.path.insert(0, "tests")
from test_scan_agreement import live_and_scanned
bad = 0
for spec in ("engine:split:vllm", "engine:fused:vllm"):
    live, scanned = live_and_scanned(Path(sys.argv[1]) / "traces", spec)
    same = live["copies"] == scanned["copies"] and live["clean"] == scanned["clean"] and not scanned["errors"]
    bad += not same
    print(f"{spec}: live {len(live['copies'])} copies {sum(c[3] for c in live['copies'])} B, "
          f"scan {len(scanned['copies'])} copies {sum(c[3] for c in scanned['copies'] if isinstance(c[3], int))} B"
          f" over {scanned['graphs']} graph(s): {'agree' if same else 'DISAGREE'}")
sys.exit(bad)
PY
step "scan == live check (copies, bytes, verdict)" $?

t0=$SECONDS
"$py" -m pytest -q -rs -p no:cacheprovider tests/test_hot_path.py \
  -k "cuda_graph or cannot_be_captured or on_device_table" > "$out/cuda-tests.txt" 2>&1
rc=$?
step "CUDA-graph hot-path tests: $(tail -n 1 "$out/cuda-tests.txt") ($((SECONDS - t0)) s)" $rc
if [[ $device == cpu ]]; then summary+=("note  no GPU: the CUDA tests skip, the traces are CPU (C++) compiles"); fi

echo "[gpu-check] summary ($out):"
cat "$out/agreement.txt" 2>/dev/null | sed 's/^/        /'
printf '  %s\n' "${summary[@]}"
exit $failed
