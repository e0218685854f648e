#!/usr/bin/env bash
# Gate examples/engine exactly as a user would: a copy of the example in a temporary folder
# outside this repo, the INSTALLED console script `compile-checks gate` reading the example's
# own [tool.compile_checks] table, the example's pytest suite with the plugin, and a negative
# control (a config that expects the fused case clean must fail the gate with exit 1).
# Then examples/engine_blocks, examples/engine_tp (2 ranks under torch.distributed) and
# examples/hf_static_cache (transformers' StaticCache decode steps and generate()) the same way, and
# examples/wan14b_meta (a 14B-class stack at production size, built on meta).
#
# Usage: scripts/gate_example.sh [VENV]   (default: .venv of this repo, made by scripts/setup_env.sh)
# Writes the gate's JUnit XML and JSON to out/gate-example/ of this repo.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(cd "${1:-$root/.venv}" && pwd)"
if [[ ! -x "$venv/bin/compile-checks" ]]; then
  echo "[gate-example] no compile-checks console script in $venv/bin: install the project there first" >&2
  exit 2
fi
export PATH="$venv/bin:$PATH"
unset PYTHONPATH  # only what is installed in the venv, as a user has it
# vLLM picks its platform once, at first import (the example's ar_paging imports vLLM): on a
# CPU-only host a user sets VLLM_TARGET_DEVICE=cpu, and so does this script
if ! command -v nvidia-smi >/dev/null 2>&1; then
  export VLLM_TARGET_DEVICE="${VLLM_TARGET_DEVICE:-cpu}"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out="$root/out/gate-example"
mkdir -p "$out"
cp -r "$root/examples/engine" "$work/engine"
cd "$work/engine"

echo "[gate-example] compile-checks gate in $work/engine (targets and pipelines from its pyproject.toml)"
compile-checks gate --junitxml "$out/junit.xml" --json > "$out/gate.json"
python - "$out/junit.xml" "$out/gate.json" <<'PY'
import json, sys, xml.etree.ElementTree as ET
junit, doc = ET.parse(sys.argv[1]).getroot(), json.load(open(sys.argv[2]))
names = [c.get("name") for c in junit.iter("testcase")]
bad = [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None or c.find("error") is not None]
assert doc["schema_version"] == 2, doc.get("schema_version")
assert len(doc["cases"]) == len(names) == 4, (len(doc["cases"]), names)  # split + fused, stock + vllm
assert sum("split" in n for n in names) == 2 and sum("fused" in n for n in names) == 2, names
assert not bad, f"failing testcases: {bad}"
print(f"[gate-example] ok: {len(names)} testcases, none failing: {', '.join(names)}")
PY

echo "[gate-example] the example's pytest suite with the compile_checks plugin"
python -m pytest -q -p no:cacheprovider --compile-checks-analysis-only

echo "[gate-example] negative control: a config that expects the fused case clean must exit 1"
mkdir "$work/wrong"
cp "$work/engine/toy_dit.py" "$work/engine/cases.py" "$work/wrong/"
cat > "$work/wrong/wrong_expectation.py" <<'PY'
"""The example's cases with the fused one (wrongly) expected clean."""
from cases import cases as _cases


def cases():
    return [c.replace(expect_clean=True) if c.name == "fused" else c for c in _cases()]
PY
cat > "$work/wrong/pyproject.toml" <<'TOML'
[tool.compile_checks]
targets = ["wrong_expectation.py:cases"]
pipelines = ["stock"]
TOML
cd "$work/wrong"
set +e
compile-checks gate --junitxml "$out/junit-wrong.xml" > "$out/gate-wrong.txt" 2>&1
rc=$?
set -e
if [[ $rc -ne 1 ]]; then
  echo "[gate-example] FAIL: the gate exited $rc with the fused case expected clean (want 1)" >&2
  cat "$out/gate-wrong.txt" >&2
  exit 1
fi
python - "$out/junit-wrong.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
failed = [c.get("name") for c in ET.parse(sys.argv[1]).getroot().iter("testcase") if c.find("failure") is not None]
assert failed and all("fused" in n for n in failed), failed
print(f"[gate-example] ok: exit 1, failing testcase(s): {', '.join(failed)}")
PY
echo "[gate-example] examples/engine_blocks (compiled per block, pools in a cache object) from $work/blocks"
cp -r "$root/examples/engine_blocks" "$work/blocks"
cd "$work/blocks"
compile-checks gate --junitxml "$out/junit-blocks.xml" > "$out/gate-blocks.txt" 2>&1 || {
  cat "$out/gate-blocks.txt" >&2; echo "[gate-example] FAIL: engine_blocks' gate did not pass" >&2; exit 1; }
python - "$out/junit-blocks.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
names = [c.get("name") for c in ET.parse(sys.argv[1]).getroot().iter("testcase")]
assert sorted(names) == ["fused", "fused[vllm]", "split", "split[vllm]"], names
print(f"[gate-example] ok: engine_blocks {len(names)} testcases pass: {', '.join(names)}")
PY
echo "[gate-example] negative controls: undeclared and lost cache writes must fail the gate (exit 1)"
set +e
compile-checks gate cases.py:negative_controls --pipeline stock --junitxml "$out/junit-blocks-neg.xml" \
  > "$out/gate-blocks-neg.txt" 2>&1
rc=$?
set -e
if [[ $rc -ne 1 ]]; then
  cat "$out/gate-blocks-neg.txt" >&2
  echo "[gate-example] FAIL: the write negative controls exited $rc (want 1)" >&2
  exit 1
fi
python - "$out/junit-blocks-neg.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
cases = {c.get("name"): c.find("failure") for c in ET.parse(sys.argv[1]).getroot().iter("testcase")}
assert set(cases) == {"side_effect", "lost"} and all(f is not None for f in cases.values()), cases
assert "undeclared_write" in cases["side_effect"].get("message", ""), cases["side_effect"].get("message")
assert "lost_write" in cases["lost"].get("message", ""), cases["lost"].get("message")
print("[gate-example] ok: exit 1; side_effect: undeclared_write, lost: lost_write")
PY
echo "[gate-example] examples/engine_tp (2 ranks under torch.distributed, pools sharded by heads) from $work/tp"
cp -r "$root/examples/engine_tp" "$work/tp"
cd "$work/tp"
compile-checks gate --junitxml "$out/junit-tp.xml" --json > "$out/gate-tp.json" || {
  cat "$out/gate-tp.json" >&2; echo "[gate-example] FAIL: engine_tp's gate did not pass" >&2; exit 1; }
python - "$out/gate-tp.json" <<'PY'
import json, sys
cases = {c["label"]: c for c in json.load(open(sys.argv[1]))["cases"]}
assert sorted(cases) == ["tp_asymmetric", "tp_fused", "tp_split"], sorted(cases)
assert all(c["passed"] and sorted(c["report"]["ranks"]) == ["0", "1"] for c in cases.values()), cases
assert cases["tp_split"]["report"]["verdict"] == "clean on 2 ranks", cases["tp_split"]["report"]["verdict"]
assert {c["rank"] for c in cases["tp_fused"]["clones"]} == {0, 1}
asym = cases["tp_asymmetric"]["report"]["verdict"]
assert asym.startswith("ranks differ: rank 0 clean; rank 1 "), asym
for name, c in cases.items():
    print(f"[gate-example] ok: {name}: {c['report']['verdict']}")
PY
echo "[gate-example] negative control: the asymmetric case expected clean on every rank must exit 1 naming rank 1"
cat > "$work/tp/wrong_tp.py" <<'PY'
"""The TP example's asymmetric case, (wrongly) expected clean on every rank."""
from cases import asymmetric_case

from compile_checks.ranks import RankedCase


def cases():
    return [RankedCase("tp_asymmetric", asymmetric_case, world_size=2, timeout_s=240)]
PY
set +e
compile-checks gate wrong_tp.py:cases --junitxml "$out/junit-tp-wrong.xml" > "$out/gate-tp-wrong.txt" 2>&1
rc=$?
set -e
if [[ $rc -ne 1 ]]; then
  cat "$out/gate-tp-wrong.txt" >&2
  echo "[gate-example] FAIL: the asymmetric case expected clean exited $rc (want 1)" >&2
  exit 1
fi
python - "$out/junit-tp-wrong.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
(case,) = ET.parse(sys.argv[1]).getroot().iter("testcase")
message = case.find("failure").get("message")
assert message.startswith("rank 1: 2 pool clone(s) survive"), message
print(f"[gate-example] ok: exit 1; {message.split(' | ')[0]}")
PY
echo "[gate-example] examples/hf_static_cache (transformers StaticCache decode, generate() through CompileConfig) from $work/hf"
cp -r "$root/examples/hf_static_cache" "$work/hf"
cd "$work/hf"
compile-checks gate --junitxml "$out/junit-hf.xml" --json > "$out/gate-hf.json" 2> "$out/gate-hf.txt" || {
  cat "$out/gate-hf.txt" >&2; echo "[gate-example] FAIL: hf_static_cache's gate did not pass" >&2; exit 1; }
python - "$out/gate-hf.json" "$out/junit-hf.xml" <<'PY'
import json, sys, xml.etree.ElementTree as ET
cases = {c["label"]: c for c in json.load(open(sys.argv[1]))["cases"]}
names = sorted(c.get("name") for c in ET.parse(sys.argv[2]).getroot().iter("testcase"))
assert sorted(cases) == names == ["decode", "generate", "stale_read"], (sorted(cases), names)
assert all(c["passed"] and c["eager_match"] for c in cases.values()), cases
for name in ("decode", "generate"):  # generate: transformers' CompileConfig deep-copies the backend it is given
    assert cases[name]["clean"] and cases[name]["report"]["num_regions"] >= 1, cases[name]["report"]
stale = cases["stale_read"]["clones"]
assert stale and {c["pool"] for c in stale} == {"layer0.k", "layer0.v"}, stale
assert all(c["explanation"].startswith("read_after_write") for c in stale), stale
for name, c in cases.items():
    print(f"[gate-example] ok: {name}: {c['report']['num_regions']} region(s), {len(c['clones'])} copies")
PY
echo "[gate-example] negative control: the read-after-write case expected clean must exit 1"
cat > "$work/hf/wrong_hf.py" <<'PY'
"""The StaticCache example's read-after-write case, (wrongly) expected clean."""
from cases import decode_case


def cases():
    return [decode_case("stale_read", stale_read=True, expect_clean=True)]
PY
set +e
compile-checks gate wrong_hf.py:cases --junitxml "$out/junit-hf-wrong.xml" > "$out/gate-hf-wrong.txt" 2>&1
rc=$?
set -e
if [[ $rc -ne 1 ]]; then
  cat "$out/gate-hf-wrong.txt" >&2
  echo "[gate-example] FAIL: the read-after-write case expected clean exited $rc (want 1)" >&2
  exit 1
fi
python - "$out/junit-hf-wrong.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
(case,) = ET.parse(sys.argv[1]).getroot().iter("testcase")
assert case.get("name") == "stale_read" and case.find("failure") is not None, ET.tostring(case)
message = case.find("failure").get("message")
assert "read_after_write" in message and "layer0.k" in message, message
print(f"[gate-example] ok: exit 1; stale_read: {message[:120]}...")
PY
echo "[gate-example] examples/wan14b_meta (a Wan-14B-like 40-block stack built on meta: production size, nothing allocated) from $work/wan"
cp -r "$root/examples/wan14b_meta" "$work/wan"
cd "$work/wan"
compile-checks gate --jobs 2 --junitxml "$out/junit-wan.xml" --json > "$out/gate-wan.json" 2> "$out/gate-wan.txt" || {
  cat "$out/gate-wan.txt" >&2; echo "[gate-example] FAIL: wan14b_meta's gate did not pass" >&2; exit 1; }
python - "$out/gate-wan.json" <<'PY'
import json, sys
cases = {c["label"]: c for c in json.load(open(sys.argv[1]))["cases"]}
assert sorted(cases) == ["fused", "split"], sorted(cases)
assert all(c["passed"] and c["analysis_only"] for c in cases.values()), cases
assert cases["split"]["clean"] and not cases["split"]["clones"], cases["split"]
fused = cases["fused"]["clones"]  # the negative control: one copy of each block's V pool (of its fused K+V allocation)
assert [c["pool"] for c in fused] == [f"layer{i}.v" for i in range(40)], [c["pool"] for c in fused]
assert {(c["nbytes"], c["op"]) for c in fused} == {(2 * 6240 * 40 * 128 * 2, "ar_paging::paged_write")}, fused[0]
for name, c in cases.items():
    (note,) = [n for n in c["notes"] if n.startswith("no values: ")]
    print(f"[gate-example] ok: {name}: {len(c['clones'])} copies; {note[:60]}...")
PY
echo "[gate-example] passed (outputs in $out)"
