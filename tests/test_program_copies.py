"""Issue 50: the pool-sized buffers the program itself makes from a pool, named by pool with their bytes.

A ring cache evicting with ``cache.copy_(torch.roll(cache, -C, 0))`` and attending over the window makes
window-sized buffers on every call: the roll's result before its write-back, and a copy of the window as
the attention kernel's input. The generated code is the oracle: every buffer of the pool's byte size
its wrapper allocates is one program copy, none of them a ``clone``. A step that writes its chunk in
place and reads a few slots (the negative control) makes none. They never fail a case unless it asks.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from compile_checks import Case
from compile_checks.api import analyze_pool_clones
from compile_checks.case import run_case
from compile_checks.cli import main
from compile_checks.gate.config import GateConfig

pytestmark = pytest.mark.compile

W, H, D, C = 16, 2, 32, 8  # a 16-token window of K and V: 16 * 2 * 32 * 4 = 4096 bytes each
WINDOW_BYTES = W * H * D * 4


def ring_step(k_cache, v_cache, q, new_k, new_v):
    k_cache.copy_(torch.roll(k_cache, -C, 0))  # evict the oldest chunk
    v_cache.copy_(torch.roll(v_cache, -C, 0))
    k_cache[-C:] = new_k
    v_cache[-C:] = new_v
    return F.scaled_dot_product_attention(q.transpose(0, 1), k_cache.transpose(0, 1), v_cache.transpose(0, 1))


def in_place_step(k_cache, v_cache, q, new_k, new_v):
    k_cache[-C:] = new_k  # no eviction, no window read: nothing pool-sized of the program's own
    v_cache[-C:] = new_v
    return q.sum() + k_cache[:2].sum() + v_cache[:2].sum()


def _args():
    k, v = torch.zeros(W, H, D), torch.zeros(W, H, D)
    return k, v, (k, v, torch.randn(C, H, D), torch.randn(C, H, D), torch.randn(C, H, D))


def _window_sized_buffers(code: str) -> int:
    """Buffers of the window's byte size the generated code allocates (float32 shapes)."""
    count = 0
    for shape in re.findall(r"= empty_strided_\w+\(\(([^)]*)\)", code):
        dims = [int(d) for d in shape.split(",") if d.strip()]
        count += int(torch.Size(dims).numel() * 4 == WINDOW_BYTES)
    return count


@pytest.mark.slow
def test_full_compile_names_every_window_sized_buffer_of_the_generated_code_by_pool() -> None:
    k, v, args = _args()
    report = analyze_pool_clones(ring_step, *args, pools={"k": k, "v": v})
    assert report.clean and report.check_passed  # no pool copy, nothing failing by default
    code = "\n".join(g for s in report.sources.values() for g in s.generated)
    copies = report.program_copies
    assert len(copies) == _window_sized_buffers(code) == 4  # the code is the oracle
    assert sorted(c.pool for c in copies) == ["k", "k", "v", "v"]
    assert {c.nbytes for c in copies} == {WINDOW_BYTES} and all(c.calls == 1 and not c.graph_only for c in copies)
    assert {c.buffer for c in copies} <= set(re.findall(r"\b(buf\d+) = empty_strided", code))
    assert any("scaled_dot_product" in c.what for c in copies)  # the attention input's copy of the window
    d = report.to_dict()["program_copies"]
    assert {c["pool"] for c in d} == {"k", "v"} and "arg" not in json.dumps(d)  # named by pool, not arg3_1


def test_analysis_only_names_the_rolls_the_graph_shows_and_fails_only_when_asked() -> None:
    k, v, args = _args()
    report = analyze_pool_clones(ring_step, *args, pools={"k": k, "v": v}, analysis_only=True)
    got = sorted((c.pool, c.nbytes, c.graph_only) for c in report.program_copies)
    assert got == [("k", WINDOW_BYTES, True), ("v", WINDOW_BYTES, True)]
    assert report.check_passed
    k, v, args = _args()
    case = Case("ring", ring_step, args=args, pools={"k": k, "v": v}, fail_on_program_copies=True)
    failed = run_case(case, analysis_only=True).report
    assert not failed.check_passed and failed.clean
    assert [p.split(",")[0] for p in failed.problems] == ["program_copy: pool k", "program_copy: pool v"]


def test_negative_control_a_step_writing_in_place_makes_no_program_copy() -> None:
    k, v, args = _args()
    report = analyze_pool_clones(in_place_step, *args, pools={"k": k, "v": v}, analysis_only=True)
    assert report.program_copies == [] and report.check_passed


CASES = """
    import torch
    from test_program_copies import _args, in_place_step, ring_step
    from compile_checks import Case

    def cases():
        k, v, args = _args()
        k2, v2, args2 = _args()
        return [
            Case("ring", ring_step, args=args, pools={"k": k, "v": v}),
            Case("in_place", in_place_step, args=args2, pools={"k": k2, "v": v2}),
        ]
"""


def test_gate_prints_them_by_pool_and_fails_on_them_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    (tmp_path / "ring_cases.py").write_text(textwrap.dedent(CASES))
    target = f"{tmp_path / 'ring_cases.py'}:cases"
    assert main(["gate", target, "--no-progress"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "program copy" in line]
    assert [line.split(",")[0].strip() for line in lines] == [
        "ring: program copy: pool k",
        "ring: program copy: pool v",
    ]
    assert f"{WINDOW_BYTES} B/call" in lines[0]
    assert main(["gate", target, "--no-progress", "--json", "--fail-on-program-copies"]) == 1
    doc = json.loads(capsys.readouterr().out)
    by_case = {c["label"]: c for c in doc["cases"]}
    assert not by_case["ring"]["passed"] and by_case["in_place"]["passed"]
    assert [c["pool"] for c in by_case["ring"]["report"]["program_copies"]] == ["k", "v"]


def test_the_table_key_is_a_bool() -> None:
    config = GateConfig.from_table(Path("pyproject.toml"), {"fail_on_program_copies": True})
    assert config.fail_on_program_copies is True
    with pytest.raises(ValueError, match="fail_on_program_copies must be a bool"):
        GateConfig.from_table(Path("pyproject.toml"), {"fail_on_program_copies": "yes"})
