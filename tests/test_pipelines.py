"""The vllm pipelines: settings read from vLLM itself, vLLM's wrapper, the piecewise simulation.

Every verdict test has its negative control (a layout that must clone under the pipeline).
Compiles stop after Inductor's post-grad passes (``analysis_only``): the verdict is what matters.
"""

from __future__ import annotations

import os
import sys

import _warm_python as warm_python
import pytest
import torch

import ar_paging  # noqa: F401 - registers torch.ops.ar_paging.paged_write
from compile_checks.api import CloneCheck, CompileCheckError
from compile_checks.case import Case, run_case
from compile_checks.pipelines import compile_for_pipeline, pipeline_settings

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the vllm pipeline reproduces vLLM's CPU path")

N, H, D, T = 256, 2, 16, 16


def commit(k, v, new_k, new_v, slots):  # type: ignore[no-untyped-def]
    torch.ops.ar_paging.paged_write(k, v, new_k, new_v, slots)
    return new_k.sum()


def commit_kv(kv, new_k, new_v, slots):  # type: ignore[no-untyped-def]
    """The whole (2, N, H, D) tensor is one input; K and V are split inside."""
    torch.ops.ar_paging.paged_write(kv[0], kv[1], new_k, new_v, slots)
    return new_k.sum()


def commit_case(layout: str, pipeline: str) -> Case:
    g = torch.Generator().manual_seed(0)
    new_k, new_v = torch.randn(T, H, D, generator=g), torch.randn(T, H, D, generator=g)
    slots = torch.randperm(N, generator=g)[:T]
    if layout == "split":
        k, v = torch.zeros(N, H, D), torch.zeros(N, H, D)
        return Case(layout, commit, (k, v, new_k, new_v, slots), pools={"k": k, "v": v}, pipeline=pipeline)
    kv = torch.zeros(2, N, H, D)
    if layout == "fused":
        pools = {"k": kv[0], "v": kv[1]}
        return Case(layout, commit, (kv[0], kv[1], new_k, new_v, slots), pools=pools, pipeline=pipeline)
    return Case(layout, commit_kv, (kv, new_k, new_v, slots), pools={"kv": kv}, pipeline=pipeline)


@pytest.fixture
def fresh_settings():
    from compile_checks.pipelines.vllm import clear_settings_cache

    clear_settings_cache()
    yield
    clear_settings_cache()


# ---- settings ----------------------------------------------------------------------------------------


def test_vllm_settings_are_read_from_vllm_config(fresh_settings):
    from compile_checks.pipelines.vllm import make_vllm_config

    settings = pipeline_settings("vllm")
    vllm_options = dict(make_vllm_config(backend=None).compilation_config.inductor_compile_config)
    assert vllm_options.pop("enable_auto_functionalized_v2") is False
    assert settings.functionalization == "v1"
    assert dict(settings.inductor_config) == vllm_options
    # what CpuPlatform.check_and_update_config adds on top of Inductor's defaults
    assert settings.inductor_config["dce"] is True and settings.inductor_config["epilogue_fusion"] is True
    assert pipeline_settings("stock").functionalization == "v2"
    assert "SIMULATION" in pipeline_settings("vllm-piecewise").label


def test_changing_vllms_config_changes_the_settings(fresh_settings, monkeypatch):
    """Negative control: the settings follow vLLM's platform hook, they are not a copy of it."""
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.check_and_update_config.__func__

    def changed(cls, vllm_config):  # type: ignore[no-untyped-def]
        original(cls, vllm_config)
        options = vllm_config.compilation_config.inductor_compile_config
        options.update({"enable_auto_functionalized_v2": True, "epilogue_fusion": False, "no_such_key": 1})

    monkeypatch.setattr(CpuPlatform, "check_and_update_config", classmethod(changed))
    settings = pipeline_settings("vllm")
    assert settings.functionalization == "v2"
    assert settings.inductor_config["epilogue_fusion"] is False
    assert "no_such_key" not in settings.inductor_config
    assert any("no_such_key" in note for note in settings.notes)


def test_environment_restored(fresh_settings, monkeypatch):
    from compile_checks.pipelines.vllm_env import vllm_env

    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    before = dict(os.environ)
    with vllm_env():
        assert os.environ["VLLM_TARGET_DEVICE"] == "cpu"
        assert os.environ["VLLM_USE_AOT_COMPILE"] == "0" and os.environ["VLLM_DISABLE_COMPILE_CACHE"] == "1"
    pipeline_settings("vllm")  # builds a VllmConfig: CpuPlatform writes os.environ
    run_case(commit_case("split", "vllm"), analysis_only=True)
    assert dict(os.environ) == before


def test_cuda_host_is_refused(monkeypatch):
    from compile_checks.pipelines.vllm_env import VllmPipelineError, vllm_env

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(VllmPipelineError, match="vllm-piecewise"), vllm_env():
        pass


def test_import_does_not_import_vllm():
    code = (
        "import sys, compile_checks, compile_checks.pipelines, compile_checks.case\n"
        "compile_checks.pipelines.pipeline_settings('stock')\n"
        "print(sorted(m for m in sys.modules if m == 'vllm' or m.startswith('vllm.')))\n"
    )
    out = warm_python.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- plain functions under "vllm" (v1) -------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", ["vllm", "vllm-piecewise"])
@pytest.mark.parametrize(("layout", "clean"), [("split", True), ("fused", False)])
def test_plain_function_under_vllm(layout, clean, pipeline):
    result = run_case(commit_case(layout, pipeline), analysis_only=True)
    assert result.report.num_regions == 1
    assert result.check_passed is clean
    if not clean:  # the negative control: a pool-sized clone of the shared storage
        assert {c.pool for c in result.report.clones} == {"v"}
        assert max(c.nbytes for c in result.report.clones) == 2 * N * H * D * 4


def test_fused_kv_clones_under_vllm_but_not_stock():
    """One (2, N, H, D) input split inside: v2 re-inplaces it, vLLM's v1 keeps clones of it."""
    stock = run_case(commit_case("fused_kv", "stock"), analysis_only=True)
    vllm = run_case(commit_case("fused_kv", "vllm"), analysis_only=True)
    assert stock.check_passed
    assert not vllm.check_passed and {c.pool for c in vllm.report.clones} == {"kv"}


# ---- @support_torch_compile modules through vLLM's wrapper ------------------------------------------------


def test_vllm_module_cases_through_vllms_wrapper():
    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper

    from compile_checks.scenarios.vllm_module import vllm_module_cases

    split, fused = vllm_module_cases()
    assert isinstance(split.fn, TorchCompileWithNoGuardsWrapper) and split.pipeline == "vllm"
    assert not split.fn.compiled
    results = [run_case(c, analysis_only=True) for c in (split, fused)]
    for case, result in zip((split, fused), results):
        assert case.fn.compiled  # vLLM's __call__ compiled it ...
        assert result.report.num_regions == 1  # ... and the check observed that compile
        assert result.passed and result.eager_match
    assert results[0].check_passed
    assert not results[1].check_passed and {c.pool for c in results[1].report.clones} == {"v"}


def test_module_compiled_outside_the_check_is_refused():
    """Negative control for observation: vLLM never recompiles, so a second check would see nothing."""
    from compile_checks.scenarios.vllm_module import vllm_module_case

    case = vllm_module_case(fused=True)
    assert not run_case(case, analysis_only=True).check_passed
    with pytest.raises(ValueError, match="already compiled by vLLM"):
        run_case(case, analysis_only=True)


def test_module_with_vllms_own_backend_is_refused():
    from compile_checks.pipelines.vllm import make_vllm_config, vllm_compile_context
    from compile_checks.scenarios.vllm_module import paged_commit_layer_cls

    with vllm_compile_context(vllm_config=make_vllm_config(backend=None)):
        layer = paged_commit_layer_cls()(k_cache=torch.zeros(N, H, D), v_cache=torch.zeros(N, H, D))
    with CloneCheck(analysis_only=True) as check, pytest.raises(ValueError, match="backend 'inductor'"):
        compile_for_pipeline(check, layer, "vllm")


def test_a_call_the_check_did_not_observe_is_an_error():
    from compile_checks.pipelines.vllm import observed_first_call

    with CloneCheck(analysis_only=True) as check:
        eager = observed_first_call(check, commit)(commit)
        with pytest.raises(CompileCheckError, match="observed no compiled region"):
            eager(*commit_case("split", "stock").args)


# ---- the vllm-piecewise CPU simulation -----------------------------------------------------------------


def _run_piecewise(fused: bool):  # type: ignore[no-untyped-def]
    from compile_checks.scenarios.vllm_module import vllm_module_case

    case = vllm_module_case(fused, pipeline="vllm-piecewise")
    settings = pipeline_settings("vllm-piecewise")
    check = CloneCheck(
        pools=dict(case.pools),
        functionalization=settings.functionalization,
        inductor_config=dict(settings.inductor_config),
        analysis_only=True,
    )
    with check:
        compiled = compile_for_pipeline(check, case.fn, "vllm-piecewise")
        output = compiled(*case.args)
    assert case.verify is not None and case.verify(output)[0]
    return check.report, compiled.simulation


@pytest.mark.parametrize("fused", [False, True])
def test_piecewise_splits_and_runs_vllms_pass_manager(fused):
    from compile_checks.scenarios.vllm_module import ATTENTION_OP

    report, sim = _run_piecewise(fused)
    assert sim.splitting_ops == [ATTENTION_OP]
    assert len(sim.splitting_pieces) == 1 and len(sim.pieces) == 2
    assert report.num_regions == 2  # one region per compiled piece, each analysed
    assert sim.pass_manager_runs == len(sim.pieces)  # vLLM's PostGradPassManager ran on every piece
    assert "rms_norm" in sim.placeholder_ops and not hasattr(torch.ops._C, "rms_norm")  # removed after
    if fused:  # negative control: the commit's piece keeps the clone of the shared K/V storage
        assert not report.clean and {(c.pool, c.region) for c in report.clones} == {("v", 0)}
    else:
        assert report.clean


def test_piecewise_needs_the_placeholder_c_ops(monkeypatch):
    """Negative control: without the placeholders vLLM's FixFunctionalizationPass fails, which
    shows the simulation really runs vLLM's PostGradPassManager."""
    import compile_checks.pipelines.piecewise as piecewise

    monkeypatch.setattr(piecewise, "fix_functionalization_c_ops", list)
    with pytest.raises(CompileCheckError, match="'_C' object has no attribute"):
        _run_piecewise(fused=False)


def test_piecewise_case_through_run_case():
    from compile_checks.scenarios.vllm_module import vllm_module_cases

    results = [run_case(c, analysis_only=True) for c in vllm_module_cases("vllm-piecewise")]
    assert [r.passed for r in results] == [True, True]
    assert [r.check_passed for r in results] == [True, False]


def _python(code: str) -> str:
    """Run ``code`` in a fresh interpreter without VLLM_TARGET_DEVICE (vLLM resolves its platform once)."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_TARGET_DEVICE"}
    return warm_python.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout


def test_prepare_process_for_vllm_sets_the_platform_only_before_vllm(monkeypatch):
    from compile_checks.pipelines.vllm_env import prepare_process_for_vllm

    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    assert prepare_process_for_vllm() is False  # vLLM is already imported here: too late to matter
    assert "VLLM_TARGET_DEVICE" not in os.environ
    out = _python(
        "from compile_checks.pipelines.vllm_env import prepare_process_for_vllm\n"
        "assert prepare_process_for_vllm()\n"
        "from vllm.platforms import current_platform; print(current_platform.is_cpu())\n"
    )
    assert out.strip().splitlines()[-1] == "True"


NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def test_vllms_nvml_cuda_check_is_taken_back_only_on_a_host_without_cuda(monkeypatch):
    """vLLM's import asks torch to check CUDA through NVML; the gate takes that back where there is no CUDA."""
    from compile_checks.pipelines import vllm_env

    assert "vllm" in sys.modules  # imported by this module's imports, as in the gate's warm_up
    monkeypatch.setenv(NVML_CHECK, "1")
    monkeypatch.setattr(vllm_env, "_cuda_available", lambda: True)
    assert vllm_env.undo_nvml_cuda_check() is False and os.environ[NVML_CHECK] == "1"  # a CUDA host keeps it
    monkeypatch.setattr(vllm_env, "_cuda_available", lambda: False)
    with monkeypatch.context() as before_vllm:
        before_vllm.delitem(sys.modules, "vllm")
        assert vllm_env.undo_nvml_cuda_check() is False and os.environ[NVML_CHECK] == "1"  # not vLLM's yet
    assert vllm_env.undo_nvml_cuda_check() is True and NVML_CHECK not in os.environ
    assert vllm_env.undo_nvml_cuda_check() is False  # nothing left to take back


def test_without_the_nvml_check_cuda_is_as_unavailable_as_with_it(monkeypatch):
    """The answer torch gives is the same both ways on this host; only its cost differs."""
    monkeypatch.setenv(NVML_CHECK, "1")
    with_nvml = torch.cuda.is_available()
    monkeypatch.delenv(NVML_CHECK)
    assert torch.cuda.is_available() == with_nvml


def test_platform_resolved_without_cpu_target_is_a_clear_error():
    """Negative control for the entry-point rule: vLLM's platform resolved first, without VLLM_TARGET_DEVICE."""
    out = _python(
        "from vllm.platforms import current_platform; current_platform.is_cpu()\n"
        "from compile_checks.pipelines.vllm_env import VllmPipelineError, vllm_env\n"
        "try:\n    with vllm_env(): pass\nexcept VllmPipelineError as e:\n    print('refused:', e)\n"
    )
    assert "refused: vLLM's platform was resolved as UnspecifiedPlatform" in out


def test_vllm_module_full_compile_matches_eager():
    """The generated code is the evidence here: vLLM's config turns size_asserts off, so a custom
    op whose fake promises other strides than its kernel returns would go wrong silently."""
    from compile_checks.scenarios.vllm_module import vllm_module_case

    result = run_case(vllm_module_case(fused=False, pipeline="vllm"))
    assert result.check_passed and result.eager_match is True


def test_module_through_vllms_wrapper_is_explained_at_the_users_line() -> None:
    """The fused module's clone names the paged_write line of the module's own source (not '(no user
    stack trace)'), through vLLM's @support_torch_compile wrapper; the split twin has nothing to explain."""
    import inspect

    from compile_checks import run_case
    from compile_checks.scenarios.vllm_module import vllm_module_case

    fused = run_case(vllm_module_case(True, pipeline="vllm"), analysis_only=True)
    (clone,) = fused.report.clones
    e = clone.explanation
    assert e is not None and e.cause == "shared_storage" and e.user_line is not None
    path, line = e.user_line.rsplit(":", 1)
    assert path.endswith("vllm_module.py")
    import compile_checks.scenarios.vllm_module as model

    source = inspect.getsource(model).splitlines()
    assert "paged_write" in source[int(line) - 1]
    split = run_case(vllm_module_case(False, pipeline="vllm"), analysis_only=True)
    assert split.report.clones == [] and split.passed


@pytest.mark.parametrize("analysis_only", [False, True])
def test_full_compiles_probe_the_cpu_outside_the_fresh_cache(analysis_only: bool) -> None:
    """A full compile probes Inductor's CPU vector ISA before compiling (outside the fresh cache
    folder ``force_disable_caches`` gives each compile, where the probe's four g++ builds were
    redone in every process); an analysis-only one, which builds no C++, does not."""
    from unittest import mock

    from torch._inductor import cpu_vec_isa

    from compile_checks.api import CloneCheck
    from compile_checks.pipelines import compile_for_pipeline
    from compile_checks.vocab import Pipeline

    check = CloneCheck(analysis_only=analysis_only)
    with mock.patch.object(cpu_vec_isa, "valid_vec_isa_list", return_value=[]) as probe:
        compile_for_pipeline(check, lambda x: x + 1, Pipeline.STOCK)  # compiles lazily: nothing runs yet
    assert probe.call_count == (0 if analysis_only else 1)
