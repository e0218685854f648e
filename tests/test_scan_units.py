"""The scan's pieces without compiling: logged graph text -> fx.Graph -> copies, the trace reader's errors,
and the command's exit codes on artifacts that are not a usable trace (never a clean verdict)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from compile_checks.cli import main
from compile_checks.scan.artifacts import GraphArtifacts, InputSource
from compile_checks.scan.copies import scan_graph
from compile_checks.scan.fx_text import parse_graph
from compile_checks.scan.inputs import PoolMap
from compile_checks.vocab import Cause, CopyKind, ExitCode

# the shape of Inductor's inductor_post_grad_graph payload (print_readable, strides and device)
KEPT_FUNCTIONAL = """class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[64, 8][8, 1]cpu", arg1_1: "i64[4][1]cpu", arg2_1: "f32[4, 8][8, 1]cpu"):
         # File: /src/model.py:10 in step, code: k[slots] = x
        index_put: "f32[64, 8][8, 1]cpu" = torch.ops.aten.index_put.default(arg0_1, [arg1_1], arg2_1)

         # File: /src/model.py:11 in step, code: total = k.sum()
        sum_1: "f32[][]cpu" = torch.ops.aten.sum.default(arg0_1)
        copy_: "f32[64, 8][8, 1]cpu" = torch.ops.aten.copy_.default(arg0_1, index_put);  arg0_1 = index_put = None
        return (sum_1,)
"""
REINPLACED = """class GraphModule(torch.nn.Module):
    def forward(self, arg0_1: "f32[64, 8][8, 1]cpu", arg1_1: "i64[4][1]cpu", arg2_1: "f32[4, 8][8, 1]cpu"):
        index_put_: "f32[64, 8][8, 1]cpu" = torch.ops.aten.index_put_.default(arg0_1, [arg1_1], arg2_1)
        sum_1: "f32[][]cpu" = torch.ops.aten.sum.default(arg0_1);  arg0_1 = None
        return (sum_1,)
"""
SYMBOLIC = """class GraphModule(torch.nn.Module):
    def forward(self, arg0_1: "Sym(s0)", arg1_1: "f32[s0, 8][8, 1]cpu", arg2_1: "i64[4][1]cpu", arg3_1: "f32[4, 8][8, 1]cpu"):
        index_put: "f32[s0, 8][8, 1]cpu" = torch.ops.aten.index_put.default(arg1_1, [arg2_1], arg3_1)
        sum_1: "f32[][]cpu" = torch.ops.aten.sum.default(arg1_1)
        copy_: "f32[s0, 8][8, 1]cpu" = torch.ops.aten.copy_.default(arg1_1, index_put);  arg1_1 = index_put = None
        return (sum_1,)
"""


def _art(text: str, **kw: object) -> GraphArtifacts:
    return GraphArtifacts(origin="test", rank=None, compile_id="0/0", post_grad=text, **kw)  # type: ignore[arg-type]


def test_parse_keeps_real_targets_vals_and_stack_traces():
    g = parse_graph(KEPT_FUNCTIONAL).graph
    nodes = {n.name: n for n in g.nodes}
    import torch

    assert nodes["index_put"].target is torch.ops.aten.index_put.default
    assert tuple(nodes["index_put"].meta["val"].shape) == (64, 8)
    assert nodes["arg1_1"].meta["val"].dtype == torch.int64
    assert 'File "/src/model.py", line 10' in nodes["index_put"].meta["stack_trace"]


def test_functional_write_kept_is_a_copy_read_after_write():
    s = scan_graph(_art(KEPT_FUNCTIONAL), PoolMap({"arg0_1": "layer0.k"}), 0)
    assert s.error is None and not s.problems
    [c] = s.copies
    assert (c["op"], c["kind"], c["nbytes"], c["pool"], c["written_bytes"]) == (
        "aten::index_put",
        CopyKind.ATEN_WRITE_COPY,
        64 * 8 * 4,
        "layer0.k",
        64 * 8 * 4,
    )
    assert c["explanation"].startswith(Cause.READ_AFTER_WRITE) and "sum_1" in c["explanation"]
    assert "model.py:10" in c["explanation"]


def test_reinplaced_write_is_clean():  # the negative control of the test above
    assert scan_graph(_art(REINPLACED), PoolMap({}), 0).copies == []


def test_shared_storage_from_the_trace_explains():
    inputs = {"arg0_1": InputSource(0, "L_k_", "L['k']", storage=1), "arg9_9": InputSource(5, "L_v_", "L['v']", 1)}
    [c] = scan_graph(_art(KEPT_FUNCTIONAL, inputs=inputs), PoolMap({}), 0).copies
    assert c["explanation"].startswith(Cause.SHARED_STORAGE) and "L['v']" in c["explanation"]
    assert c["pool"] is None and c["input"] == "L['k']"  # no --pools: never a guessed pool name


def test_symbolic_bytes_are_expressions():
    s = scan_graph(_art(SYMBOLIC), PoolMap({}), 0)
    [c] = s.copies
    assert c["nbytes"] == "32*s0" and c["shape"] == ["s0", "8"]
    assert any("symbolic sizes (s0)" in n for n in s.notes)


def test_missing_post_grad_is_an_error_not_clean():
    s = scan_graph(_art(None), PoolMap({}), 0)  # type: ignore[arg-type]
    assert s.error is not None and "no post-grad graph" in s.error


def _record(meta: dict[str, object], payload: str | None = None) -> str:
    if payload is not None:
        meta = {**meta, "has_payload": hashlib.md5(payload.encode(), usedforsecurity=False).hexdigest()}
    line = f"V1203 19:28:16.034000 6297 torch/_inductor/compile_fx.py:1543] {json.dumps(meta)}"
    return line + ("".join(f"\n\t{p}" for p in payload.split("\n")) if payload is not None else "")


IDS = {"frame_id": 0, "frame_compile_id": 0, "attempt": 0}


def _metrics(fail_type: str | None = None, fail_reason: str | None = None) -> str:
    """Dynamo's last record of a compile (torch/_dynamo/utils.py ``record_compilation_metrics``)."""
    metrics = {"compile_id": "0/0", "co_name": "f", "fail_type": fail_type, "fail_reason": fail_reason}
    return _record({"compilation_metrics": metrics, **IDS})


METRICS = _metrics()


def _trace(tmp_path: Path, *records: str, ended: bool = True) -> Path:
    """A log of ``records``; ``ended``: closed by the compile's compilation_metrics record, as a whole log is."""
    d = tmp_path / "trace"
    d.mkdir(parents=True)
    (d / "dedicated_log_torch_trace_x.log").write_text("\n".join([*records, *([METRICS] if ended else [])]) + "\n")
    return d


DYNAMO = _record(
    {"dynamo_output_graph": {}, **IDS}, "class GraphModule(torch.nn.Module):\n    def forward(self, L_k_):"
)
POST_GRAD = _record({"artifact": {"name": "inductor_post_grad_graph", "encoding": "string"}, **IDS}, KEPT_FUNCTIONAL)


def test_cli_scans_a_trace(tmp_path, capsys):
    code = main(["scan", str(_trace(tmp_path, DYNAMO, POST_GRAD)), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == ExitCode.NOT_MET and doc["exit_code"] == 1
    assert [c["nbytes"] for c in doc["cases"][0]["clones"]] == [2048]


def test_cli_graph_expectation_negative_control(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.compile_checks.scan]\ngraphs = {"0/0" = false}\n')
    trace = _trace(tmp_path, DYNAMO, POST_GRAD)
    assert main(["scan", str(trace), "--config", str(tmp_path / "pyproject.toml")]) == ExitCode.CLEAN


def test_cli_missing_post_grad_graph_exits_4(tmp_path, capsys):
    assert main(["scan", str(_trace(tmp_path, DYNAMO))]) == ExitCode.COMPILE
    # the table wraps its cells to the terminal's width: the words are read with whitespace folded
    assert "no post-grad graph" in " ".join(capsys.readouterr().out.split())


def test_cli_truncated_trace_exits_2(tmp_path, capsys):
    cut = POST_GRAD[: len(POST_GRAD) // 2]  # a job killed while the payload was written
    assert main(["scan", str(_trace(tmp_path, DYNAMO, cut))]) == ExitCode.USAGE
    assert "does not match its logged hash" in capsys.readouterr().err


def test_cli_log_cut_at_a_record_boundary_exits_2(tmp_path, capsys):
    # every record whole, the compile's closing compilation_metrics missing: a job killed between two records
    assert main(["scan", str(_trace(tmp_path, DYNAMO, POST_GRAD, ended=False))]) == ExitCode.USAGE
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "compile [0/0] has no compilation_metrics record" in line and "cut short" in line


def test_cli_failed_compile_exits_4_not_clean(tmp_path, capsys):
    # the post-grad graph was logged (clean: the write reinplaced), then Inductor failed: never a clean verdict
    post_grad = _record({"artifact": {"name": "inductor_post_grad_graph", "encoding": "string"}, **IDS}, REINPLACED)
    failed = _metrics("InductorError", "RuntimeError: planted codegen failure\nmore lines of it")
    assert main(["scan", str(_trace(tmp_path, DYNAMO, post_grad, failed, ended=False)), "--json"]) == ExitCode.COMPILE
    [case] = json.loads(capsys.readouterr().out)["cases"]
    assert case["error_kind"] == "compile" and "\n" not in case["error"]
    assert "the compile failed (InductorError: RuntimeError: planted codegen failure)" in case["error"]
    # its negative control: the same log, the compile ended well
    assert main(["scan", str(_trace(tmp_path / "ok", DYNAMO, post_grad))]) == ExitCode.CLEAN


def test_cli_unknown_format_exits_2(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello\n")
    assert main(["scan", str(tmp_path / "notes.txt")]) == ExitCode.USAGE
    assert main(["scan", str(tmp_path)]) == ExitCode.USAGE
    assert "looked for" in capsys.readouterr().err


def test_cli_pools_file_and_per_pool_expectation(tmp_path, capsys):
    (tmp_path / "pools.toml").write_text('[pools]\narg0_1 = "layer0.k"\n')
    (tmp_path / "pyproject.toml").write_text('[tool.compile_checks.scan]\npools = {"layer0.k" = false}\n')
    trace = _trace(tmp_path, DYNAMO, POST_GRAD)
    args = ["scan", str(trace), "--pools", str(tmp_path / "pools.toml"), "--config", str(tmp_path / "pyproject.toml")]
    junit = tmp_path / "out" / "scan.xml"
    assert main([*args, "--junitxml", str(junit)]) == ExitCode.CLEAN  # the graph's copy is the pool's to judge
    assert 'name="pool layer0.k"' in junit.read_text()
    (tmp_path / "pyproject.toml").write_text('[tool.compile_checks.scan]\npools = {"layer0.k" = true}\n')
    assert main(args) == ExitCode.NOT_MET


# Inductor's debug folder (fx_graph_transformed.py) and depyf (AFTER_POST_GRAD) print no strides
NO_STRIDES = """class GraphModule(torch.nn.Module):
    def forward(self, arg0_1: "f32[64, 8]", arg1_1: "f32[2, 8]", arg2_1: "i64[2]"):
        # File: /tmp/scan/fmt.py:4 in f, code: k2 = k.index_put((s,), x)
        index_put: "f32[64, 8]" = torch.ops.aten.index_put.default(arg0_1, [arg2_1], arg1_1);  arg2_1 = arg1_1 = None

        # File: /tmp/scan/fmt.py:5 in f, code: out = k.sum()
        sum_1: "f32[]" = torch.ops.aten.sum.default(arg0_1)

        # File: /tmp/scan/fmt.py:6 in f, code: k.copy_(k2)
        copy_: "f32[64, 8]" = torch.ops.aten.copy_.default(arg0_1, index_put);  arg0_1 = index_put = copy_ = None
        return (sum_1,)
"""


@pytest.mark.parametrize(
    "layout",
    ["torchinductor/model__0_inference_0.0/fx_graph_transformed.py", "rank_1/__compiled_fn_3.AFTER_POST_GRAD.0.py"],
)
def test_debug_folder_and_depyf_dump(tmp_path, layout, capsys):
    path = tmp_path / layout
    path.parent.mkdir(parents=True)
    path.write_text("from __future__ import annotations\nimport torch\n" + NO_STRIDES)
    assert main(["scan", str(tmp_path), "--json"]) == ExitCode.NOT_MET
    [case] = json.loads(capsys.readouterr().out)["cases"]
    assert [c["nbytes"] for c in case["clones"]] == [64 * 8 * 4]
    assert any("taken as contiguous" in n for n in case["notes"])
    assert case["report"]["rank"] == (1 if "rank_1" in layout else None)


def test_unreadable_size_is_undecided_not_clean():
    text = NO_STRIDES.replace('index_put: "f32[64, 8]"', 'index_put: "weird"')
    s = scan_graph(_art(text), PoolMap({}), 0)
    assert s.copies == [] and s.problems and "cannot be decided" in s.problems[0]


def test_cli_scan_usage_errors(tmp_path, capsys):
    assert main(["scan"]) == ExitCode.USAGE  # a PATH is required
    assert main(["--json", "scan", str(tmp_path)]) == ExitCode.USAGE  # the scan's options follow `scan`
    assert main(["scan", str(tmp_path / "missing")]) == ExitCode.USAGE
    (tmp_path / "pyproject.toml").write_text("[tool.compile_checks.scan]\nexpect_clen = true\n")
    assert main(["scan", str(tmp_path), "--config", str(tmp_path / "pyproject.toml")]) == ExitCode.USAGE
    assert "expect_clen" in capsys.readouterr().err


def test_gate_config_accepts_the_scan_table(tmp_path):
    from compile_checks.gate.config import load_config

    (tmp_path / "pyproject.toml").write_text(
        '[tool.compile_checks]\ntargets = ["c.py:cases"]\n[tool.compile_checks.scan]\n'
    )
    config = load_config(tmp_path / "pyproject.toml")
    assert config is not None and config.targets == ("c.py:cases",)


# auto_functionalized v1's write-back of a mutated view: copy_(kv, select_scatter(kv, clone, 0, 0))
V1_VIEW = """class GraphModule(torch.nn.Module):
    def forward(self, arg0_1: "f32[2, 8, 4][32, 4, 1]cpu", arg1_1: "i64[2][1]cpu", arg2_1: "f32[2, 4][4, 1]cpu"):
        select: "f32[8, 4][4, 1]cpu" = torch.ops.aten.select.int(arg0_1, 0, 0)
        clone: "f32[8, 4][4, 1]cpu" = torch.ops.aten.clone.default(select);  select = None
        index_put_: "f32[8, 4][4, 1]cpu" = torch.ops.aten.index_put_.default(clone, [arg1_1], arg2_1)
        select_scatter: "f32[2, 8, 4][32, 4, 1]cpu" = torch.ops.aten.select_scatter.default(arg0_1, clone, 0, 0)
        copy_: "f32[2, 8, 4][32, 4, 1]cpu" = torch.ops.aten.copy_.default(arg0_1, select_scatter)
        return ()
"""


def test_v1_view_write_back_is_not_a_later_read():
    [c] = scan_graph(_art(V1_VIEW), PoolMap({}), 0).copies
    assert (c["node"], c["nbytes"], c["kind"]) == ("clone", 8 * 4 * 4, CopyKind.FUNCTIONALIZATION_CLONE)
    assert c["explanation"].startswith(Cause.VIEW_OF_INPUT_V1)  # the scatter is the write-back, not a reader


def test_unregistered_op_given_a_clone_is_undecided():
    text = V1_VIEW.replace("torch.ops.aten.index_put_.default", "torch.ops.nowhere.write_.default")
    s = scan_graph(_art(text), PoolMap({}), 0)
    assert s.copies == [] and any("nowhere.write_" in p and "--import" in p for p in s.problems)


def test_fx_graph_cache_hit_logs_the_graph_as_its_own_event(tmp_path, capsys):
    cache_hit = _record({"inductor_post_grad_graph": {}, **IDS}, KEPT_FUNCTIONAL)  # torch/_inductor/codecache.py
    assert main(["scan", str(_trace(tmp_path, DYNAMO, cache_hit)), "--json"]) == ExitCode.NOT_MET
    assert [c["nbytes"] for c in json.loads(capsys.readouterr().out)["cases"][0]["clones"]] == [2048]


def test_one_log_per_rank(tmp_path, capsys):
    d = tmp_path / "trace"
    d.mkdir()
    for rank in (0, 1):  # LazyTraceHandler names a rank's log dedicated_log_torch_trace_rank_N_*.log
        (d / f"dedicated_log_torch_trace_rank_{rank}_x.log").write_text(f"{DYNAMO}\n{POST_GRAD}\n{METRICS}\n")
    assert main(["scan", str(d), "--json"]) == ExitCode.NOT_MET
    labels = [c["label"] for c in json.loads(capsys.readouterr().out)["cases"]]
    assert labels == ["rank0 [0/0]", "rank1 [0/0]"]
