"""Shared test configuration: Inductor caches off for every test, hypothesis profile, the ar_paging debug-checks fixture."""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

# vLLM resolves its platform at first import: a CUDA vLLM wheel on this CPU-only host needs
# VLLM_TARGET_DEVICE=cpu before anything (ar_paging, the vllm pipelines) imports vLLM
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
# pytest-xdist's workers run with COLUMNS=80 (execnet's default), which the gate honours off a terminal:
# the tests read the gate's tables as a CI log prints them (COLUMNS unset: 160 columns), with or without -n
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)

import pytest
from _scheduling import shared_setup_groups

# torch, hypothesis and the test helpers are imported where tests run (a worker, or pytest without -n),
# not at this module's import: pytest-xdist's controller only hands out tests, and its ~2 s of imports
# came before either worker started.


def _runs_tests(config: pytest.Config) -> bool:
    """False in pytest-xdist's controller, which neither collects nor runs a test itself (xdist's own
    test for starting workers: a distribution mode and workers to start, outside ``--collect-only``)."""
    if hasattr(config, "workerinput"):  # an xdist worker
        return True
    distributes = config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    return bool(config.getoption("collectonly")) or not distributes


def pytest_configure(config: pytest.Config) -> None:
    if not _runs_tests(config):
        return
    from hypothesis import settings  # before collection: a test's @settings reads the loaded profile

    settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _inductor_caches_off():
    """Inductor's FX graph cache can hand back code compiled for another layout."""
    import torch
    import torch._inductor.config as inductor_config

    from compile_checks.pipelines import probe_cpu_isa

    probe_cpu_isa()  # before caches go off: else every worker's first C++ build re-runs the probe (~8 s)
    old = inductor_config.force_disable_caches
    inductor_config.force_disable_caches = True
    torch.manual_seed(0)
    yield
    inductor_config.force_disable_caches = old


@pytest.fixture(autouse=True, scope="session")
def _kernel_store(tmp_path_factory: pytest.TempPathFactory):
    """Each distinct Inductor C++ kernel is built by g++ once per session (_kernel_store: why it is sound).

    ``TESTS_KERNEL_STORE=0`` builds every kernel in every compile, as the product does. The folder is
    exported in ``TESTS_KERNEL_STORE``: a test's subprocess may use it (``_kernel_store.from_environment``).
    """
    from _checks import session_folder
    from _kernel_store import STORE_ENV, kernel_store

    if os.environ.get(STORE_ENV) == "0":
        yield
        return
    store = Path(os.environ.get(STORE_ENV) or session_folder(tmp_path_factory, "kernels"))
    os.environ[STORE_ENV] = str(store)
    with kernel_store(store):
        yield


@pytest.fixture(autouse=True, scope="session")
def _guard_latency():
    """Dynamo compiles without timing each frame's guards (_guard_latency: why it changes no result);
    ``TESTS_GUARD_LATENCY=1`` measures as torch does."""
    from _guard_latency import GUARD_LATENCY_ENV, guard_latency_unmeasured

    if os.environ.get(GUARD_LATENCY_ENV) == "1":
        yield
        return
    with guard_latency_unmeasured():
        yield


@pytest.fixture
def debug_checks():
    """ar_paging's debug checks (range/duplicate slot checks, syncs) on for one test, restored after."""
    import ar_paging

    before = ar_paging.debug_checks_enabled()
    ar_paging.set_debug_checks(True)
    yield
    ar_paging.set_debug_checks(before)


@pytest.fixture(scope="session")
def truths(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[], Any]], Any]:
    """``truths(key, compute)``: a ground truth computed once per session across xdist workers (_checks.shared_truth)."""
    from _checks import session_folder, shared_truth

    root = session_folder(tmp_path_factory, "truths")
    return lambda key, compute: shared_truth(root, key, compute)


# ---- pytest-xdist: shared setup on one worker, the longest work first ----------------------------------
# A test module whose tests share an expensive module/session fixture (or a module-level cache) runs on
# one worker, so it is built once (a module fixture is per worker) and no worker waits on the other's
# lock: _scheduling.shared_setup_groups reads those scopes from each module's source. Each group is one
# unit of work, handed out in collection order (`--no-loadscope-reorder`): the longest units go first,
# so the two workers finish together instead of one idling while the other runs a 30 s unit last.
# (xdist_group marks do not group here: xdist 3.8 renames `item._nodeid`, which pytest 9.2 no longer reads;
# so `--dist loadgroup` gets this scheduler, which groups by file name.)
SHARED_SETUP_GROUPS = shared_setup_groups(Path(__file__).resolve().parent)
# the longest single tests and groups (--durations), first in the queue
LONGEST_FIRST = (
    "tests/test_scan_agreement.py",
    "tests/test_compile_checks_e2e.py",  # with test_scenarios_cases.py: one group (scenario_analysis)
    "tests/test_scenarios_cases.py",
    "tests/test_ranks_example.py",
    "tests/test_view_scatter_choice.py",
    "tests/test_robust_dumps.py::test_every_cli_dump_path_keeps_the_verdict[dump]",
    "tests/test_ranks_launch.py",  # its hang case (12 s, mostly asleep) runs in the background of the module
    "tests/test_ranks_collectives.py",
    "tests/test_warm_cache.py",  # a full compile into a cache folder, then the gate's run against it in a subprocess
    "tests/test_scenarios_generated_code.py",
    "tests/test_compile_checks_cli.py::test_list_into_a_closed_pipe_exits_0",
    "tests/test_chunk_window.py::test_registration_in_a_fresh_process",
    "tests/test_readme_example.py",
    "tests/test_hot_path.py::test_import_does_not_import_vllm",
    "tests/test_cli_gate_plan.py::test_jobs_2_runs_cases_in_worker_processes",
)


def shared_setup_group(nodeid: str) -> str | None:
    """The group of a test whose module shares an expensive fixture (SHARED_SETUP_GROUPS), else None."""
    return SHARED_SETUP_GROUPS.get(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])


def _queue_rank(item: pytest.Item) -> int:
    for i, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return i
    return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_queue_rank)  # stable: the order within a rank is the collection order


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (pyproject addopts): every test its own unit, except a shared-setup module's."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedSetupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_setup_group(nodeid) or nodeid

    return SharedSetupScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Once the tests are collected (torch, vLLM and every test module imported), the heap is frozen and
    the collector's thresholds raised (_gc_tuning: why; ``TESTS_GC_TUNE=0`` keeps the defaults), and on a
    host without CUDA vLLM's NVML-based CUDA check is taken back."""
    from _gc_tuning import tune_gc

    from compile_checks.pipelines.vllm_env import undo_nvml_cuda_check

    tune_gc()
    # as in a process the gate owns (vllm_env.undo_nvml_cuda_check: why); collection imported vLLM
    undo_nvml_cuda_check()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """An xdist worker leaves without tearing down its heap (``exit_without_teardown``: every other exit
    handler runs first, the warm-python server's close included): the controller waited ~2.4 s for each
    worker's teardown before it printed the summary. ``TESTS_FAST_EXIT=0`` tears down as usual."""
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("TESTS_FAST_EXIT", "1") != "0":
        from compile_checks.gate.runner import exit_without_teardown

        atexit.register(exit_without_teardown)
