"""The engine gate's parts that need no engine: the CLI's up-front checks (exit 2 / 3 before vLLM starts),
caches shared by layers named as one pool, buffers the generated code fills from a pool, culprit passes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from compile_checks.check.findings import CloneReport
from compile_checks.check.writes.finding import WriteFinding
from compile_checks.cli import main
from compile_checks.pipelines.vllm_engine_buffers import GeneratedBuffers, pool_filled_buffers
from compile_checks.pipelines.vllm_engine_culprits import name_culprits
from compile_checks.pipelines.vllm_engine_hooks import shared_pools
from compile_checks.pipelines.vllm_engine_passes import NodeInfo, PassEdit
from compile_checks.vocab import ExitCode, WriteProblem


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    return tmp_path / "m"


@pytest.mark.parametrize(
    ("extra", "code", "said"),
    [
        (["--max-tokens", "0"], ExitCode.USAGE, "--max-tokens must be at least 1"),
        (["--llm-kwargs", "{not json"], ExitCode.USAGE, "--llm-kwargs is not JSON"),
        (["--llm-kwargs", "[1]"], ExitCode.USAGE, "must be a JSON object"),
        (["--llm-kwargs", '{"enforce_eager": true}'], ExitCode.USAGE, "compiles nothing"),
        (["--llm-kwargs", '{"compilation_config": {"mode": 0}}'], ExitCode.USAGE, "compiles nothing"),
        (["--kv-cache-bytes", "-1"], ExitCode.USAGE, "--kv-cache-bytes must be positive"),
        (["--json", "/nonexistent-dir-51/out.json"], ExitCode.UNWRITABLE, "cannot be written"),
    ],
)
def test_bad_engine_arguments_exit_before_the_engine_starts(
    model_dir: Path, extra: list[str], code: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["engine", str(model_dir), *extra]) == code
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1, err


def test_a_missing_model_folder_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", str(tmp_path / "absent")]) == ExitCode.USAGE
    assert "no such folder" in capsys.readouterr().err
    assert main(["engine", str(tmp_path)]) == ExitCode.USAGE  # a folder, no config.json
    assert "holds no config.json" in capsys.readouterr().err


def test_layers_sharing_one_allocation_are_one_pool_named_by_its_layers() -> None:
    """vLLM's hybrid manager: a sliding and a full-attention layer viewing the same bytes; side-by-side caches
    of one storage (vLLM's usual layout) stay apart."""
    raw = torch.zeros(4 * 2 * 8 * 4)
    shared = {"l0": raw.view(4, 2, 8, 4), "l1": raw.view(4, 2, 8, 4), "l2": torch.zeros(4, 2, 8, 4)}
    pools, layers_of = shared_pools(shared)
    assert list(pools) == ["l0+l1", "l2"] and layers_of == {"l0+l1": ("l0", "l1"), "l2": ("l2",)}
    assert pools["l0+l1"] is shared["l0"]
    side = torch.zeros(2, 64)
    pools, layers_of = shared_pools({"a": side[0], "b": side[1]})
    assert list(pools) == ["a", "b"]
    # partial overlap: one byte view over the union
    pools, _ = shared_pools({"x": side[0, :40], "y": side[0, 20:]})
    assert list(pools) == ["x+y"] and pools["x+y"].numel() * pools["x+y"].element_size() == 64 * 4


CODE = """
cpp_fused_clone_0 = async_compile.cpp_pybinding(['const float*', 'const float*', 'float*', 'float*', 'const int64_t'], r'''
''')
cpp_fused_rest_1 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''
''')
class Runner:
    def call(self, args):
        arg0_1, arg1_1, arg2_1 = args
        args.clear()
        s72 = arg0_1
        buf0 = empty_strided_cpu((s72, 64), (64, 1), torch.float32)
        buf1 = empty_strided_cpu((16, 2, 128, 64), (16384, 8192, 64, 1), torch.float32)
        buf2 = reinterpret_tensor(buf1, (16, 2, 64, 64), (16384, 8192, 64, 1), 0)  # alias
        cpp_fused_clone_0(arg1_1, reinterpret_tensor(arg2_1, (16, 2, 128, 64), (1, 1, 1, 1), 0), buf0, buf2, s72)
        buf3 = empty_strided_cpu((8, 8), (8, 1), torch.float32)
        cpp_fused_rest_1(arg1_1, buf3)
"""


def test_every_static_buffer_a_kernel_fills_while_reading_a_pool_is_counted_and_named() -> None:
    """A K half of a cache (half a pool's size) is pool traffic; the per-token activation the same kernel writes
    and a buffer filled from a non-pool input are not."""
    found = pool_filled_buffers(CODE, {2: "model.layers.0.self_attn.attn"}, {"buf1": frozenset({"clone"})})
    assert [(b.name, b.nbytes, b.pool, b.kernel, b.origins) for b in found] == [
        ("buf1", 16 * 2 * 128 * 64 * 4, "model.layers.0.self_attn.attn", "cpp_fused_clone_0", ("clone",))
    ]
    assert pool_filled_buffers(CODE, {}) == []  # no pool among the inputs


def _edit(**kinds: dict[str, NodeInfo]) -> PassEdit:
    return PassEdit(0, "post_grad_custom_post_pass", "DropsTheWrite", **kinds)


def test_a_lost_write_names_the_pass_that_removed_the_layers_cache_update() -> None:
    report = CloneReport(num_regions=1)
    report.run_findings = [WriteFinding(WriteProblem.LOST_WRITE, "a+b", "_C::x", "lost", region=0)]
    removed = {"unified_kv_cache_update": NodeInfo("vllm.unified_kv_cache_update.default", (), "b")}
    culprits = name_culprits(report, [_edit(removed=removed)], {"a+b": ("a", "b")}, [])
    assert [c.line() for c in culprits] == [
        "DropsTheWrite (post_grad_custom_post_pass) removed node unified_kv_cache_update "
        "(vllm.unified_kv_cache_update.default): lost_write of a+b"
    ]
    assert "caused by DropsTheWrite" in report.run_findings[0].message
    # another region's finding is not blamed on it
    report.run_findings = [WriteFinding(WriteProblem.LOST_WRITE, "c", "_C::x", "lost", region=1)]
    assert name_culprits(report, [_edit(removed=removed)], {"c": ("c",)}, []) == []


def test_the_write_checks_opaque_op_hint_is_replaced_by_the_pass_that_changed_the_region() -> None:
    report = CloneReport(num_regions=1)
    report.errors = [
        "write check, region 0 (forward (llama.py:406)) call 3: the eager run could not restore pool 'a' (dim 0 [1-2] "
        "still differ after the rollback): an op wrote it where the check cannot see (an opaque op's kernel that "
        "declares no write); register its write footprint, or Case(check_writes=False)"
    ]
    added = {"read_cache_default": NodeInfo("cc.read_cache.default", ("arg8_1",), None)}
    name_culprits(report, [_edit(added=added)], {"a": ("a",)}, [])
    [error] = report.errors
    assert "declares no write" not in error and "DropsTheWrite (post_grad_custom_post_pass) added node" in error


def test_a_buffer_computed_from_a_node_a_pass_added_names_the_pass() -> None:
    [buffer] = pool_filled_buffers(CODE, {2: "L0"}, {"buf1": frozenset({"clone"})})
    generated = [GeneratedBuffers(0, 0, 0, 1, buffer.nbytes, (buffer,))]
    added = {"clone": NodeInfo("aten.clone.default", ("slice_1",), None)}
    [culprit] = name_culprits(CloneReport(num_regions=1), [_edit(added=added)], {}, generated)
    assert culprit.action == "added" and culprit.node == "clone" and culprit.buffer == "buf1"
    # the cross-check's disagreement as a Finding, the pass its culprit
    from compile_checks.pipelines.vllm_engine import EngineGate
    from compile_checks.vocab import FindingKind

    gate = EngineGate(CloneReport(num_regions=1), [], generated, [[1]], culprits=[culprit])
    [finding] = gate.cross_check_findings()
    assert finding.kind == FindingKind.GENERATED_CODE_DISAGREES and finding.culprit == "DropsTheWrite"
    assert finding.bytes_per_call == buffer.nbytes and finding.details["buffers"][0]["name"] == "buf1"


def test_the_cli_json_carries_culprits_and_named_buffers(model_dir: Path) -> None:
    """The JSON keys the engine command writes (no engine: the record's shape)."""
    from dataclasses import asdict

    [buffer] = pool_filled_buffers(CODE, {2: "L0"})
    assert (
        json.loads(json.dumps(asdict(GeneratedBuffers(0, 0, 0, 1, buffer.nbytes, (buffer,)))))["buffers"][0]["name"]
        == "buf1"
    )


def test_vllm_failing_is_an_engine_error_of_one_line_and_the_checks_own_errors_pass_through() -> None:
    from compile_checks.api import CompileCheckError
    from compile_checks.pipelines.vllm_engine import _engine_step
    from compile_checks.pipelines.vllm_engine_options import EngineError

    def refuses() -> None:
        raise ValueError("1 validation error for ModelConfig\n\n  max_model_len 100000 > 256\n  more detail")

    with pytest.raises(EngineError) as e:
        _engine_step("building vllm.LLM", refuses)
    assert str(e.value) == (
        "vLLM failed building vllm.LLM: ValueError: 1 validation error for ModelConfig; max_model_len 100000 > 256; "
        "more detail"
    )

    def check_fails() -> None:
        raise CompileCheckError("the check's own")

    with pytest.raises(CompileCheckError):
        _engine_step("generating", check_fails)


def test_a_failing_gate_never_ends_with_no_surviving_pool_clones() -> None:
    from compile_checks.pipelines.vllm_engine import EngineGate, LayerCache

    layer = LayerCache("l0", (16, 2, 128, 128), "float32", 2097152, received=True, reached=0, layers=("l0",))
    gate = EngineGate(CloneReport(num_regions=1), [layer], [GeneratedBuffers(0, 0, 0, 1, 1048576)], [[1]])
    text = gate.format()
    assert not gate.passed and "no surviving pool clones" not in text, text
    assert text.splitlines()[-1].startswith("FAIL: 1 problem(s) above"), text


def test_a_copy_a_pass_added_is_explained_by_that_pass_not_by_a_missing_reinplace_decision() -> None:
    from compile_checks.check.findings import SurvivingClone
    from compile_checks.explain.explanations import Conflict, Explanation
    from compile_checks.vocab import Cause

    unexplained = Explanation(Cause.OTHER, "no reinplace decision was recorded for `kv_cache`; Inductor: Reinplace ...")
    copy = SurvivingClone("cc::write", "kv_cache", 2097152, (16, 2, 128, 128), torch.float32, pool="l1", node="clone_1")
    raw = Explanation(
        Cause.READ_AFTER_WRITE,
        "the old value is read after the write; the read follows the write in the program itself",
        conflicting=[Conflict("read_1", "cc::read")],
    )
    own = dataclasses.replace(raw, conflicting=[Conflict("index_9", "aten::index")])
    read = SurvivingClone("cc::write", "kv_cache", 2097152, (16, 2, 128, 128), torch.float32, pool="l2", node="clone_2")
    report = CloneReport(num_regions=1)
    report.clones = [
        dataclasses.replace(copy, explanation=unexplained),
        dataclasses.replace(read, explanation=raw),
        # its reader is the program's own: unchanged
        dataclasses.replace(read, pool="l3", node="clone_3", explanation=own),
    ]
    edits = [
        PassEdit(
            0, "post_grad_custom_post_pass", "Redirect", added={"clone_1": NodeInfo("aten.clone.default", (), "l1")}
        ),
        PassEdit(0, "post_grad_custom_post_pass", "Reads", added={"read_1": NodeInfo("cc.read.default", (), "l2")}),
    ]
    culprits = name_culprits(report, edits, {}, [])
    assert [(c.pass_class, c.node) for c in culprits] == [("Redirect", "clone_1"), ("Reads", "read_1")]
    first, second, third = (c.explanation for c in report.clones)
    assert first.culprit_pass == "Redirect" and "was recorded" not in first.reason
    assert "culprit pass: Redirect (the pass added node clone_1 in this region's graph)" in first.lines()
    assert second.culprit_pass == "Reads" and "program itself" not in second.reason and "Reads" in second.reason
    assert third == own
