"""Where a scanned graph came from, without compiling: a trace whose compile a cache served, the aliasing
its artifact was compiled for against Dynamo's storages, and the gate's ``cache_divergence`` rule on plain data.

The records are the shapes torch 2.14 logs: the ``aotautograd_cache_hit`` / ``fx_graph_cache_hit`` artifacts,
Dynamo's ``describe_tensor`` storage ids, and the output code's ``get_args()`` harness (views of one
``_shared_storage_N`` when the compiled inputs shared a storage).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from compile_checks.cli import main
from compile_checks.gate.warm_cache import divergence
from compile_checks.scan.cache_origin import harness_storages
from compile_checks.vocab import CacheServed, ExitCode

IDS = {"frame_id": 0, "frame_compile_id": 0, "attempt": 0}
DYNAMO = """class GraphModule(torch.nn.Module):
    def forward(self, L_k_: "f32[64, 8][8, 1]cpu", L_v_: "f32[64, 8][8, 1]cpu"):
        add: "f32[64, 8][8, 1]cpu" = L_k_ + L_v_
        return (add,)"""
AOT = """class <lambda>(torch.nn.Module):
    def forward(
        self,
        arg0_1: "f32[64, 8][8, 1]cpu",  # PlainAOTInput(idx=0)
        arg1_1: "f32[64, 8][8, 1]cpu",  # PlainAOTInput(idx=1)
    ):
        add: "f32[64, 8][8, 1]cpu" = torch.ops.aten.add.Tensor(arg0_1, arg1_1);  arg0_1 = arg1_1 = None
        return (add,)"""
POST_GRAD = """class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[64, 8][8, 1]cpu", arg1_1: "f32[64, 8][8, 1]cpu"):
        add: "f32[64, 8][8, 1]cpu" = torch.ops.aten.add.Tensor(arg0_1, arg1_1);  arg0_1 = arg1_1 = None
        return (add,)"""
# what torch 2.14 logged for the split layout served the fused layout's artifact (the cache's post-grad graph)
SERVED_FUSED = """class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[64, 2, 64][128, 64, 1]cpu", arg1_1: "f32[64, 2, 64][128, 64, 1]cpu", arg2_1: "f32[4, 2, 64][128, 64, 1]cpu", arg3_1: "f32[4, 2, 64][128, 64, 1]cpu", arg4_1: "i64[4][1]cpu"):
        as_strided_default: "f32[16384][1]cpu" = torch.ops.aten.as_strided.default(arg1_1, [16384], [1], 0)
        clone_default: "f32[16384][1]cpu" = torch.ops.aten.clone.default(as_strided_default);  as_strided_default = None
        as_strided_default_1: "f32[64, 2, 64][128, 64, 1]cpu" = torch.ops.aten.as_strided.default(clone_default, [64, 2, 64], [128, 64, 1], 8192);  clone_default = None
        paged_write_default = torch.ops.ar_paging.paged_write.default(arg0_1, as_strided_default_1, arg2_1, arg3_1, arg4_1);  arg2_1 = arg3_1 = arg4_1 = paged_write_default = None
        copy_: "f32[64, 2, 64][128, 64, 1]cpu" = torch.ops.aten.copy_.default(arg0_1, arg0_1);  arg0_1 = copy_ = None
        copy__1: "f32[64, 2, 64][128, 64, 1]cpu" = torch.ops.aten.copy_.default(arg1_1, as_strided_default_1);  arg1_1 = as_strided_default_1 = copy__1 = None
        return ()"""
CALL = """def call(args):
    arg0_1, arg1_1 = args
    buf0 = empty_strided_cpu((64, 8), (8, 1), torch.float32)
    return (buf0, )

"""
HARNESS_SHARED = """def get_args():
    from torch._dynamo.testing import rand_strided
    _shared_storage_0 = rand_strided((1024,), (1,), device='cpu', dtype=torch.float32)
    arg0_1 = torch.as_strided(_shared_storage_0, (64, 8), (8, 1))
    arg1_1 = torch.as_strided(_shared_storage_0, (64, 8), (8, 1))
    return [arg0_1, arg1_1]


def benchmark_compiled_module(times=10, repeat=10):
    return 0
"""
HARNESS_SEPARATE = """def get_args():
    from torch._dynamo.testing import rand_strided
    arg0_1 = rand_strided((64, 8), (8, 1), device='cpu', dtype=torch.float32)
    arg1_1 = rand_strided((64, 8), (8, 1), device='cpu', dtype=torch.float32)
    return [arg0_1, arg1_1]
"""


def _record(meta: dict[str, object], payload: str | None = None) -> str:
    if payload is not None:
        meta = {**meta, "has_payload": hashlib.md5(payload.encode(), usedforsecurity=False).hexdigest()}
    line = f"V1205 23:50:33.819000 7150 torch/_functorch/_aot_autograd/autograd_cache.py:1200] {json.dumps(meta)}"
    return line + ("".join(f"\n\t{p}" for p in payload.split("\n")) if payload is not None else "")


def _trace(
    tmp_path: Path, *, storages: tuple[int, int], harness: str, served: tuple[str, ...], post_grad: str = POST_GRAD
) -> Path:
    records = []
    for tid, (source, storage) in enumerate(zip(("L['k']", "L['v']"), storages, strict=True)):
        records.append(_record({"describe_tensor": {"id": tid, "storage": storage, "size": [64, 8]}, **IDS}))
        records.append(_record({"describe_source": {"id": tid, "source": source}, **IDS}))
    records += [
        _record({"dynamo_output_graph": {}, **IDS}, DYNAMO),
        _record({"aot_inference_graph": {}, **IDS}, AOT),
        _record({"inductor_post_grad_graph": {}, **IDS}, post_grad),
        _record({"inductor_output_code": {"filename": "c.py"}, **IDS}, CALL + harness),
    ]
    records += [_record({"artifact": {"name": name, "encoding": "json"}, **IDS}, "{}") for name in served]
    records.append(_record({"compilation_metrics": {"compile_id": "0/0", "fail_type": None}, **IDS}))
    d = tmp_path / "trace"
    d.mkdir()
    (d / "dedicated_log_torch_trace_x.log").write_text("\n".join(records) + "\n")
    return d


def _scan(trace: Path, capsys, code: ExitCode = ExitCode.CLEAN) -> dict[str, object]:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    assert main(["scan", str(trace), "--json", "--import", "ar_paging"]) == code
    (case,) = json.loads(capsys.readouterr().out)["cases"]
    return case  # type: ignore[no-any-return]


HITS = (CacheServed.FX_GRAPH.value, CacheServed.AOTAUTOGRAD.value)


def _aliasing(case: dict[str, object]) -> list[str]:
    return [f"{f['kind']}: {f['message']}" for f in case["findings"] if f["kind"] == "cache_aliasing"]  # type: ignore[index]


def test_served_graph_compiled_for_one_storage_run_on_two(tmp_path, capsys):
    """The warm split run: served by both caches, an artifact compiled for K and V in one storage: a failing
    finding (exit 1) naming both aliasings, the artifact and the fix, not a note."""
    case = _scan(_trace(tmp_path, storages=(0, 1), harness=HARNESS_SHARED, served=HITS), capsys, ExitCode.NOT_MET)
    assert case["report"]["served_from"] == ["aotautograd_cache_hit", "fx_graph_cache_hit"]
    assert "served from the AOTAutograd cache and FX graph cache" in "\n".join(case["notes"])
    (finding,) = _aliasing(case)
    assert "compiled for `L['k']`, `L['v']` in one storage" in finding and "separate storages" in finding
    assert "`c.py`" in finding  # the artifact: the output code's logged file
    assert "TORCHINDUCTOR_CACHE_DIR" in finding and "torch._inductor" in finding and "clear" in finding
    assert not case["passed"] and case["report"]["run_findings"][0]["kind"] == "cache_aliasing"


def test_served_graph_compiled_for_two_storages_run_on_one(tmp_path, capsys):
    """The reverse: the fused layout served the split layout's artifact (its code reads before the view it is
    handed): a finding too."""
    case = _scan(_trace(tmp_path, storages=(0, 0), harness=HARNESS_SEPARATE, served=HITS[1:]), capsys, ExitCode.NOT_MET)
    assert case["report"]["served_from"] == ["aotautograd_cache_hit"]
    (finding,) = _aliasing(case)
    assert "in separate storages, while Dynamo describes them as one storage" in finding


def test_matching_aliasing_and_cold_compiles_say_nothing(tmp_path, capsys):
    """Negative controls: a served artifact whose aliasing is the inputs' has no mismatch and passes; a compile
    no cache served is not marked at all (same harness as the failing case above: only the hit records differ)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    same = _scan(_trace(tmp_path / "a", storages=(0, 0), harness=HARNESS_SHARED, served=HITS), capsys)
    assert same["report"]["served_from"] and not any("cache_origin" in n for n in same["notes"])
    assert same["passed"] and not _aliasing(same)
    cold = _scan(_trace(tmp_path / "b", storages=(0, 1), harness=HARNESS_SHARED, served=()), capsys)
    assert cold["report"]["served_from"] == [] and not any("served from" in n for n in cold["notes"])
    assert cold["passed"] and not _aliasing(cold)


def test_served_copy_fails_by_its_origin(tmp_path, capsys):
    """The copy a served artifact makes fails the graph twice over: as a copy, and by where it came from (the
    cache_aliasing finding); the copy is explained by the layout the artifact was compiled for, with the cache's
    fix. The same graph compiled in the traced process (no hit records: the negative control) has no finding and
    keeps the graph's own explanation."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    kw = {"storages": (0, 1), "harness": HARNESS_SHARED, "post_grad": SERVED_FUSED}
    served = _scan(_trace(tmp_path / "a", served=HITS, **kw), capsys, ExitCode.NOT_MET)
    (copy,) = served["clones"]
    assert copy["nbytes"] == 65536 and "TORCHINDUCTOR_CACHE_DIR" in _aliasing(served)[0]
    assert copy["explanation"].startswith("shared_storage: the graph was served from a compile cache")
    cold = _scan(_trace(tmp_path / "b", served=(), **kw), capsys, ExitCode.NOT_MET)
    (cold_copy,) = cold["clones"]
    assert cold_copy["nbytes"] == 65536 and not _aliasing(cold)
    assert "compile cache" not in cold_copy["explanation"]


def test_harness_storages_reads_get_args():
    assert harness_storages(CALL) is None  # no harness: nothing said
    assert harness_storages(CALL + HARNESS_SHARED) == {"arg0_1": "_shared_storage_0", "arg1_1": "_shared_storage_0"}
    assert harness_storages(HARNESS_SEPARATE) == {"arg0_1": "arg0_1", "arg1_1": "arg1_1"}


def test_divergence_needs_other_bytes():
    """The gate's rule (the mutation controls): equal copies, nothing served, or a graph the cache did not
    serve: no finding; an extra copy, or a missing one when every graph was served: a finding naming the cache."""
    copy = {"nbytes": 65536, "op": "ar_paging::paged_write", "arg": "v_pool", "input": "L['v']"}
    cold = {k: copy[k] for k in ("nbytes", "op", "arg")}
    graph = {"label": "[0/0]", "served_from": ["aotautograd_cache_hit"], "copies": [copy], "notes": []}
    assert divergence([], {"graphs": [], "missed": 0}, "/c") is None
    assert divergence([cold], {"graphs": [graph], "missed": 0}, "/c") is None
    extra = divergence([], {"graphs": [graph], "missed": 0}, "/c")
    assert extra is not None and extra.startswith("cache_divergence:")
    assert "/c" in extra and "copies 65536 bytes per call that a cold compile does not" in extra
    lacking = {**graph, "copies": []}
    missing = divergence([{**cold, "nbytes": 4096}], {"graphs": [lacking], "missed": 0}, "/c")
    assert missing is not None and "lacks 4096 bytes per call" in missing
    assert divergence([{**cold, "nbytes": 4096}], {"graphs": [lacking], "missed": 1}, "/c") is None
    # another op or argument of equal bytes is another copy (the negative control of matching by op and argument)
    other = divergence([{**cold, "arg": "k_pool"}], {"graphs": [graph], "missed": 0}, "/c")
    assert other is not None and "lacks 65536" in other and "copies 65536" in other


def test_divergence_one_graph_reused_per_layer():
    """The cold verdict lists a copy per pool a call passed (one graph reused by three layers: three entries); the
    served graph, the same code, lists it once: no finding (it once read as "lacks 3072 bytes")."""
    copy = {"nbytes": 1024, "op": "ar_paging::paged_write", "arg": "v_pool", "input": "L['v']"}
    graph = {"label": "[0/0]", "served_from": ["aotautograd_cache_hit"], "copies": [copy], "notes": []}
    cold = [{"nbytes": 1024, "op": "ar_paging::paged_write", "arg": "v_pool", "pool": f"layer{i}.v"} for i in range(4)]
    assert divergence(cold, {"graphs": [graph], "missed": 0}, "/c") is None
    lacking = divergence(cold, {"graphs": [{**graph, "copies": []}], "missed": 0}, "/c")
    assert lacking is not None and "lacks 1024 bytes per call" in lacking  # counted once per call, not per layer


def test_divergence_symbolic_bytes_at_the_calls_sizes():
    """A recompiled symbolic graph (pools of 48, 56 and 64 slots: 48 static, 56 and 64 symbolic): its copy's
    expression evaluated at the recorded calls' sizes matches the cold verdict's bytes; never dropped."""
    op = {"op": "ar_paging::paged_write", "arg": "v_pool", "input": "L['v']"}
    static = {"label": "[0/0]", "served_from": ["fx_graph_cache_hit"], "notes": [], "copies": [{**op, "nbytes": 6144}]}
    symbolic = {**static, "label": "[0/1]", "copies": [{**op, "nbytes": "128*s0", "nbytes_per_call": [7168, 8192]}]}
    cold = [{**op, "nbytes": n} for n in (6144, 7168, 8192)]
    assert divergence(cold, {"graphs": [static, symbolic], "missed": 0}, "/c") is None
    wrong = {**symbolic, "copies": [{**op, "nbytes": "256*s0", "nbytes_per_call": [14336, 16384]}]}
    found = divergence(cold, {"graphs": [static, wrong], "missed": 0}, "/c")
    assert found is not None and "256*s0: 14336, 16384 at the calls' sizes" in found and "lacks 15360" in found
    # an expression no call's sizes evaluate: neither matched nor missed (nothing claimed)
    unknown = {**symbolic, "copies": [{**op, "nbytes": "128*s0", "nbytes_per_call": []}]}
    assert divergence(cold, {"graphs": [static, unknown], "missed": 0}, "/c") is None


def test_symbols_bound_from_the_calls():
    """The post-grad graph's bare size symbols bound to each recorded call's sizes (a contradiction or a call of
    another arity binds nothing)."""
    from compile_checks.scan.call_sizes import bind_symbols, nbytes_per_call

    graph = """class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "Sym(s0)", arg1_1: "f32[s0, 2, 64][128, 64, 1]cpu", arg2_1: "f32[s0, 2, 64][128, 64, 1]cpu"):
        add: "f32[s0, 2, 64][128, 64, 1]cpu" = torch.ops.aten.add.Tensor(arg1_1, arg2_1)
        return (add,)"""
    calls = [[56, [56, 2, 64], [56, 2, 64]], [64, [64, 2, 64], [64, 2, 64]], [64, [56, 2, 64], [64, 2, 64]], [64]]
    bindings = bind_symbols(graph, calls)
    assert bindings == [{"s0": 56}, {"s0": 64}]
    assert nbytes_per_call("512*s0", bindings) == [28672, 32768]


def test_inductor_cache_must_be_a_folder(tmp_path, capsys):
    """``--inductor-cache`` naming a regular file or a missing folder is a usage error (exit 2) naming the path,
    before anything is compiled; ``[tool.compile_checks] inductor_cache`` likewise. An existing empty folder is
    accepted (the negative control: it runs, and serves nothing)."""
    target = f"{Path(__file__).resolve().parent / '_warm_cache_cases.py'}:split"
    a_file = tmp_path / "cache.txt"
    a_file.write_text("not a cache")
    missing = tmp_path / "no-such-cache"
    for bad in (a_file, missing):
        capsys.readouterr()
        assert (
            main(["gate", target, "--inductor-cache", str(bad), "--no-progress", "--analysis-only"]) == ExitCode.USAGE
        )
        err = capsys.readouterr().err
        assert str(bad) in err and "--inductor-cache" in err
    table = tmp_path / "pyproject.toml"
    table.write_text(f'[tool.compile_checks]\ntargets = ["{target}"]\ninductor_cache = "no-such-cache"\n')
    assert main(["gate", "--config", str(table), "--no-progress", "--analysis-only"]) == ExitCode.USAGE
    assert "no-such-cache" in capsys.readouterr().err
    from compile_checks.gate.warm_cache import cache_dir_checked

    (tmp_path / "empty").mkdir()
    assert cache_dir_checked(tmp_path / "empty", "--inductor-cache") == (tmp_path / "empty").resolve()
