"""The gate's start and end: built-in cases are declared, not built, to be planned; a ``--jobs`` worker
sets vLLM's platform itself (the CLI spawns it before importing torch) and leaves without tearing
down its heap, its output flushed and the exit handlers registered after its start run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compile_checks.gate import one_case
from compile_checks.gate.one_case import GC_THRESHOLDS, warm_up
from compile_checks.gate.plan import plan_builtin
from compile_checks.gate.runner import CaseBuilder, Workers
from compile_checks.lazy_case import LazyCase
from compile_checks.vocab import Mode, Pipeline

ROOT = Path(__file__).resolve().parent.parent


def test_planning_the_built_in_gate_builds_no_case(monkeypatch: pytest.MonkeyPatch) -> None:
    import compile_checks.scenarios.cases as cases

    built: list[str] = []
    real = cases.scenario_case
    monkeypatch.setattr(cases, "scenario_case", lambda s, *a, **k: built.append(s.name) or real(s, *a, **k))
    plan = plan_builtin([], [], mode=Mode.ANALYSIS)
    assert len(plan.cases) >= 30 and built == []
    assert all(isinstance(c, LazyCase) for entries in plan.preloaded.values() for c in entries)
    # running one case builds that one only
    planned = next(p for p in plan.cases if p.label == "split[vllm]")
    case = CaseBuilder(plan.preloaded).take(planned)
    assert (case.name, case.pipeline, built) == ("split[vllm]", Pipeline.VLLM, ["split"])


def test_every_declared_built_in_case_builds_as_declared() -> None:
    """``LazyCase.materialize`` raises when a build disagrees with its declaration (name, expectation,
    pipeline); every case of the default gate and its smoke is built once here."""
    plan = plan_builtin([], [], mode=Mode.ANALYSIS)
    builder = CaseBuilder(plan.preloaded)
    for planned in plan.cases:
        case = builder.take(planned)
        assert case.expects_clean_on(planned.pipeline) is planned.expect_clean, planned.label


def test_a_declaration_that_disagrees_with_its_build_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for the test above: a registry whose expectation drifted from the built case."""
    import compile_checks.scenarios.declared as declared
    from compile_checks.lazy_case import LazyCaseError
    from compile_checks.scenarios.registry import SCENARIOS

    drifted = {**SCENARIOS, "fused": SCENARIOS["split"]}  # declared clean, built from "fused"'s spec name
    monkeypatch.setattr(declared, "SCENARIOS", drifted)
    lazy = declared.declared_builtin(["fused"], Pipeline.STOCK)[0]
    with pytest.raises(LazyCaseError, match="declared"):
        lazy.materialize()


def test_the_gate_commands_import_no_torch() -> None:
    """The CLI spawns its workers before it imports torch (~1.2 s): importing the gate must not."""
    code = "import sys, compile_checks.gate.commands; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False", out.stderr


def _platform() -> str | None:
    return os.environ.get("VLLM_TARGET_DEVICE")


def _gc_state() -> tuple[int, tuple[int, int, int]]:
    import gc

    return gc.get_freeze_count(), gc.get_threshold()


def _nvml_check_after_warm_up() -> str | None:
    """vLLM's NVML-based CUDA check as ``import vllm`` leaves it, then ``warm_up``: what is left of it."""
    import vllm.env_override  # noqa: F401  # what ``import vllm`` runs first

    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # as that import sets it (it runs once per process)
    warm_up(builtin=False)
    return os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")


def _last_words(marker: str) -> None:
    Path(marker).write_text("ran")
    sys.stdout.write("worker's last words")  # no newline, no flush, after multiprocessing's own flush


def _register_handler(marker: str) -> int:
    import atexit

    atexit.register(_last_words, marker)
    return os.getpid()


def test_a_worker_sets_vllms_platform_and_exits_flushed_with_its_handlers_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from compile_checks.pipelines import vllm_env

    if vllm_env._cuda_available():
        pytest.skip("prepare_process_for_vllm sets no CPU platform on a CUDA host")
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)  # the worker inherits this environment
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)  # its stdout block-buffered, as in a plain shell
    workers = Workers(2)
    try:
        assert workers.pool.submit(_platform).result(timeout=120) == "cpu"
        frozen, thresholds = workers.pool.submit(_gc_state).result(timeout=60)
        assert frozen > 100_000 and thresholds == GC_THRESHOLDS  # its imported heap frozen by warm_up
        assert workers.pool.submit(_nvml_check_after_warm_up).result(timeout=120) is None  # no CUDA here
        marker = tmp_path / "handler"
        pid = workers.pool.submit(_register_handler, str(marker)).result(timeout=60)
        (process,) = [p for p in workers.pool._processes.values() if p.pid == pid]  # type: ignore[union-attr]
        manager = workers.pool._executor_manager_thread  # type: ignore[attr-defined]
    finally:
        workers.close()
    # the pool's manager thread reaps the process: its exit code is stored once that thread has joined it
    manager.join(timeout=60)
    process.join(timeout=60)
    assert process.exitcode == 0
    assert marker.read_text() == "ran"  # every other exit handler runs before the worker leaves
    assert "worker's last words" in capfd.readouterr().out  # flushed by the last handler before os._exit


def test_exit_without_teardown_runs_the_handlers_registered_before_it(tmp_path: Path) -> None:
    """The handlers registered before it run too (last-in first-out order alone would skip them); stdout is
    flushed; the status is its 0, not the 3 ``sys.exit`` asked for (the process left through it)."""
    marker = tmp_path / "earlier"
    code = (
        "import atexit, pathlib, sys\n"
        "from compile_checks.gate.runner import exit_without_teardown\n"
        f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'ran')\n"
        "atexit.register(exit_without_teardown)\n"
        "sys.stdout.write('unflushed')\n"
        "sys.exit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONUNBUFFERED", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert (out.returncode, out.stdout, marker.read_text()) == (0, "unflushed", "ran"), out.stderr


def test_the_gate_tunes_the_collector_only_of_a_process_it_owns(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main([...])`` called from another program (here: pytest) leaves that process's collector alone;
    the console script claims its process, and then ``warm_up`` freezes the heap. Negative control: the
    same ``warm_up`` in a claimed process does change it, so the first check can see a change."""
    import gc

    from compile_checks.cli import main

    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "set_threshold", lambda *t: calls.append(f"threshold{t}"))
    monkeypatch.setattr(one_case, "_OWNS_PROCESS", False)
    assert main(["list"]) == 0
    warm_up(builtin=False)
    assert calls == [] and one_case._OWNS_PROCESS is False
    monkeypatch.setattr(sys, "argv", ["compile-checks", "list"])
    assert main() == 0  # as the console script runs it
    assert one_case._OWNS_PROCESS is True
    warm_up(builtin=False)
    assert calls == ["freeze", f"threshold{GC_THRESHOLDS}"]


def test_vllms_nvml_check_stays_in_a_process_the_gate_does_not_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for the worker's check above: the same steps in a caller's process (this one)
    leave vLLM's variable as vLLM set it."""
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    monkeypatch.setattr(one_case, "_OWNS_PROCESS", False)
    assert _nvml_check_after_warm_up() == "1"
