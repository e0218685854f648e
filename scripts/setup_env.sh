#!/usr/bin/env bash
# Create a venv from nothing and install a pinned lock into it; a no-op when the lock (and
# pyproject.toml) have not changed since the last install (their hash is stamped in the venv).
#
# Usage: scripts/setup_env.sh [VENV] [LOCK]
#   default: .venv from requirements/lock.txt (torch 2.14.0, what vLLM 0.33 pins)
#   the lower bound: scripts/setup_env.sh .venv-torch2.13 requirements/lock-torch2.13.txt
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3}"
venv="${1:-.venv}"
lock="${2:-requirements/lock.txt}"
stamp="$venv/.lock-sha256"
want="$(cat "$lock" pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
torch_pin="$(grep -E '^torch==' "$lock" | head -n1)"
[[ -n "$torch_pin" ]] || { echo "[setup] $lock pins no torch (want a 'torch==X' line)" >&2; exit 1; }
rm -rf "$venv"
# torch 2.14.0's wheel and the CUDA runtime libraries it links take ~6 GiB installed, and pip unpacks
# them beside it: refuse up front rather than leave a half-installed venv (CI once ran out mid-install);
# measured after the old venv is gone, whose space the new one takes
need_kib=$((8 * 1024 * 1024))
free_kib="$(df -Pk "$(dirname "$(realpath -m "$venv")")" | awk 'NR==2 {print $4}')"
if (( free_kib < need_kib )); then
  echo "[setup] $((free_kib / 1024 / 1024)) GiB free where $venv goes; installing $lock needs ~8 GiB" >&2
  exit 1
fi
echo "[setup] creating $venv with $($py --version) and installing $lock ($torch_pin) ..." >&2
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade-strategy only-if-needed pip==23.2.1 >/dev/null 2>&1 || true
# --no-deps: every package is pinned in the lock and nothing else is installed. vLLM's own
# requirements (a CUDA stack) are deliberately not followed, nor torch's: the lock pins the CUDA
# runtime libraries torch 2.14.0's wheel links (shared libraries it needs to import even on a CPU)
# but not its GPU-only tooling (triton, cuda-bindings). No GPU is needed: checked below, torch
# imports with its libraries from this venv and Inductor compiles on the CPU. pyproject.toml
# declares ranges (for users installing beside vLLM); a lock is one exact environment inside them.
pip_install() {  # pip's own exit status decides (pipefail); only a known harmless warning is dropped
  "$venv/bin/python" -m pip install -q --no-deps --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
pip_install -r "$lock" \
  || { echo "[setup] pip failed installing $lock into $venv (its error is above); $venv is incomplete" >&2; exit 1; }
pip_install --no-build-isolation -e . \
  || { echo "[setup] pip failed installing this package (-e .) into $venv (its error is above)" >&2; exit 1; }
"$venv/bin/python" - "$torch_pin" <<'PY'
import os
import re
import sys

from packaging.requirements import Requirement
from packaging.version import Version

import torch, vllm.v1.core.block_pool, vllm.v1.core.single_type_kv_cache_manager  # noqa: F401
import vllm.v1.kv_cache_interface, vllm.v1.kv_cache_spec_registry, depyf, pandas  # noqa: F401
import ar_paging, compile_checks, compile_checks.reports  # noqa: F401

pin = Requirement(sys.argv[1])
assert pin.specifier.contains(Version(torch.__version__)), f"torch {torch.__version__} installed, the lock pins {pin}"
# no GPU needed, and nothing borrowed from the host: every CUDA library torch loaded lies in this venv
venv = os.path.realpath(sys.prefix)
loaded = {line.split()[-1] for line in open("/proc/self/maps") if ".so" in line}
cuda_libs = sorted(p for p in loaded if re.search(r"/lib(cu|nv|nccl|caffe2_nvrtc)", p))
outside = [p for p in cuda_libs if not os.path.realpath(p).startswith(venv + os.sep)]
assert not outside, f"torch loaded CUDA libraries from outside {venv}: {outside}"


def f(x):
    return torch.sin(x) * 2 + x.cumsum(0)


x = torch.randn(64)
compiled = torch.compile(f, backend="inductor", fullgraph=True)
assert torch.allclose(compiled(x), f(x)), "Inductor's CPU code disagrees with eager"
print(f"[setup] ok: torch {torch.__version__} (CUDA build: {torch.version.cuda or 'no'}, "
      f"{len(cuda_libs)} CUDA libraries loaded from the venv, GPU available: {torch.cuda.is_available()}; "
      f"Inductor compiled on the CPU), vllm {vllm.__version__}")
PY
# the editable install put the console script next to python (what scripts/gate_example.sh runs)
[[ -x "$venv/bin/compile-checks" ]] || { echo "[setup] no $venv/bin/compile-checks after 'pip install -e .'" >&2; exit 1; }
echo "$want" > "$stamp"
