#!/usr/bin/env bash
# The install the README gives, as a user does it: a wheel built from the checkout (what
# `pip wheel --no-deps --no-build-isolation .` makes), installed with --no-deps into a FRESH venv
# that sees the engine's packages (torch, vLLM 0.33, ...) but not this checkout, then
# `compile-checks gate` on examples/engine copied to a folder outside the repo.
#
# The fresh venv borrows VENV's third-party packages through one .pth line (a path line: the .pth
# files in VENV's site-packages, the editable install of this checkout among them, are not run), so
# nothing is downloaded. Checked: the wheel's Requires-Dist (with [vllm,reports]) is met by what is
# installed (vLLM 0.33's torch and depyf pins), its files are ar_paging/ and compile_checks/ only,
# compile_checks is imported from the fresh venv, and the gate passes (exit 0) with a negative
# control: the fused case expected clean exits 1.
#
# Usage: scripts/test_wheel.sh [VENV]   (default: .venv of this repo). About 20 s of CPU (build 3 s, two
# stock analysis-only gates of the example); its wall time is said at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(cd "${1:-$root/.venv}" && pwd)"
py="$venv/bin/python"
unset PYTHONPATH  # only what is installed, as a user has it
if ! command -v nvidia-smi >/dev/null 2>&1; then
  export VLLM_TARGET_DEVICE="${VLLM_TARGET_DEVICE:-cpu}"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
started=$SECONDS

echo "[wheel] building the wheel from the checkout's files (git ls-files, copied to $work/src)"
mkdir "$work/src"
# (a tracked file deleted in the work tree is skipped: tar --ignore-failed-read)
(cd "$root" && git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$work/src"
[[ -f "$work/src/pyproject.toml" ]] || { echo "[wheel] FAIL: the checkout's files were not copied" >&2; exit 1; }
"$py" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w "$work/dist" "$work/src" >/dev/null
wheel=("$work"/dist/ar_compile_checks-*.whl)
[[ -f "${wheel[0]}" ]] || { echo "[wheel] FAIL: pip wheel made no ar_compile_checks wheel" >&2; exit 1; }

echo "[wheel] a fresh venv ($work/venv) that sees $venv's packages but not this checkout"
"$py" -m venv --without-pip "$work/venv"
site_of() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
fresh_site="$(site_of "$work/venv/bin/python")"
echo "$(site_of "$py")" > "$fresh_site/engine-packages.pth"
"$py" -m pip --python "$work/venv/bin/python" install -q --no-deps --disable-pip-version-check "${wheel[0]}"

cd "$work"  # not the checkout: python - puts the working folder first on sys.path
"$work/venv/bin/python" - "${wheel[0]}" "$fresh_site" <<'PY'
import importlib.metadata as md
import sys
import zipfile

from packaging.requirements import Requirement

wheel, fresh_site = sys.argv[1], sys.argv[2]
import compile_checks  # noqa: E402

assert compile_checks.__file__.startswith(fresh_site), f"compile_checks imported from {compile_checks.__file__}"
dist = md.distribution("ar-compile-checks")  # the wheel's metadata, not the checkout's editable install
assert str(dist.locate_file("")).startswith(fresh_site), f"ar-compile-checks metadata from {dist.locate_file('')}"
tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist() if not n.split("/")[0].endswith(".dist-info")}
assert tops == {"ar_paging", "compile_checks"}, f"the wheel ships {sorted(tops)}"
unmet = []
for req in map(Requirement, md.requires("ar-compile-checks") or []):
    extras = [{"extra": e} for e in ("", "vllm", "reports")]
    if req.marker is not None and not any(req.marker.evaluate(env) for env in extras):
        continue  # [test], [all]
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        unmet.append(f"{req} (not installed)")
        continue
    if not req.specifier.contains(have, prereleases=True):
        unmet.append(f"{req} (installed: {have})")
assert not unmet, f"the wheel's requirements are not met beside the installed engine: {unmet}"
print(f"[wheel] ok: {wheel.rsplit('/', 1)[-1]} installed; requirements met by torch {md.version('torch')}, "
      f"vllm {md.version('vllm')}, depyf {md.version('depyf')}; compile_checks from the fresh venv")
PY

echo "[wheel] compile-checks gate on examples/engine, outside the repo (stock pipeline)"
cp -r "$root/examples/engine" "$work/engine"
cd "$work/engine"
"$work/venv/bin/compile-checks" gate --pipeline stock --no-progress > "$work/gate.txt" 2>&1 || {
  cat "$work/gate.txt" >&2; echo "[wheel] FAIL: the installed wheel's gate did not pass" >&2; exit 1; }
grep -E "^[0-9]+ case\(s\)" "$work/gate.txt"
cat > "$work/engine/wrong.py" <<'PY'
from cases import cases as _cases


def cases():
    return [c.replace(expect_clean=True) if c.name == "fused" else c for c in _cases()]
PY
set +e
"$work/venv/bin/compile-checks" gate wrong.py:cases --pipeline stock --analysis-only --no-progress > "$work/wrong.txt" 2>&1
rc=$?
set -e
if [[ $rc -ne 1 ]]; then
  cat "$work/wrong.txt" >&2; echo "[wheel] FAIL: the fused case expected clean exited $rc (want 1)" >&2; exit 1
fi
echo "[wheel] ok: negative control (fused expected clean) exits 1; $((SECONDS - started)) s in all"
