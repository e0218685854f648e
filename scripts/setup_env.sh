#!/usr/bin/env bash
# Create .venv/ from nothing and install the pinned environment; a no-op when the
# lock file has not changed since the last install (its hash is stamped in .venv/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3}"
lock="requirements/lock.txt"
stamp=".venv/.lock-sha256"
want="$(cat "$lock" pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ -x .venv/bin/python && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
echo "[setup] creating .venv with $($py --version) and installing $lock ..." >&2
rm -rf .venv
"$py" -m venv .venv
.venv/bin/python -m pip install -q --upgrade-strategy only-if-needed pip==23.2.1 >/dev/null 2>&1 || true
# --no-deps: every package is pinned in the lock; vLLM's own requirements (torch 2.14 + CUDA
# kernels) are deliberately not followed. pyproject.toml declares ranges (for users installing
# beside vLLM); the lock is this project's one exact environment inside them.
.venv/bin/python -m pip install -q --no-deps --disable-pip-version-check -r "$lock" 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
.venv/bin/python -m pip install -q --no-deps --no-build-isolation --disable-pip-version-check -e . 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
.venv/bin/python - <<'PY'
import torch, vllm.v1.core.block_pool, vllm.v1.core.single_type_kv_cache_manager  # noqa: F401
import vllm.v1.kv_cache_interface, vllm.v1.kv_cache_spec_registry, depyf, pandas  # noqa: F401
import ar_paging, compile_checks, compile_checks.reports  # noqa: F401
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert not torch.version.cuda, f"a CUDA torch was installed ({torch.version.cuda}); expected the CPU build"
print(f"[setup] ok: torch {torch.__version__}, vllm {vllm.__version__}")
PY
# the editable install put the console script next to python (what scripts/gate_example.sh runs)
[[ -x .venv/bin/compile-checks ]] || { echo "[setup] no .venv/bin/compile-checks after 'pip install -e .'" >&2; exit 1; }
echo "$want" > "$stamp"
