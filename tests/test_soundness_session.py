"""Issue 8 items 6-7 and issue 7's hook verification: the check never passes blind.

* hooked Inductor functions are verified (missing / other signature -> IncompatibleTorchError);
* overlapping sessions are refused (CheckSessionError) and patches are always restored;
* a region whose post-grad graph the hook never saw, a backward graph, a mutating op in a
  higher-order-op subgraph: listed in ``report.unanalysed``; the check and ``run_case``
  fail on them unless allowed.
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.fx
from _soundness_steps import commit_args, op_commit_after_gather, op_commit_late_read, pools_split
from torch._inductor import compile_fx as compile_fx_module
from torch._inductor.fx_passes import post_grad as post_grad_module

from compile_checks.api import CloneCheck, CompileCheckError, format_report
from compile_checks.case import Case, run_case
from compile_checks.check import backend, hooks
from compile_checks.check.attribution import build_report
from compile_checks.check.graph.blind_spots import subgraph_mutations
from compile_checks.check.hooks import CheckSessionError
from compile_checks.vocab import PHASES, BlindSpot

pytestmark = pytest.mark.compile


def _hooked() -> tuple[object, object]:
    return compile_fx_module.post_grad_passes, post_grad_module.reinplace_inplaceable_ops


# ---- hook verification ------------------------------------------------------------------------
def test_installed_torch_passes_hook_verification() -> None:
    hooks._verified = None
    hooks.verify_inductor_hooks()
    assert hooks._verified == torch.__version__


@pytest.mark.parametrize("broken", ["renamed_param", "missing"])
def test_a_changed_hook_signature_is_an_incompatible_torch_error(monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    if broken == "missing":
        monkeypatch.delattr(post_grad_module, "reinplace_inplaceable_ops")
    else:
        monkeypatch.setattr(post_grad_module, "reinplace_inplaceable_ops", lambda graph, updater: None)
    monkeypatch.setattr(hooks, "_verified", None)
    with pytest.raises(hooks.IncompatibleTorchError) as err:
        CloneCheck().__enter__()
    msg = str(err.value)
    assert torch.__version__ in msg and "reinplace_inplaceable_ops" in msg
    monkeypatch.undo()
    assert not hooks._session_lock.locked()  # nothing was left half-entered


# ---- sessions ----------------------------------------------------------------------------------
def test_overlapping_sessions_in_two_threads_the_second_is_refused_and_patches_restored() -> None:
    before = _hooked()
    a_in, b_done = threading.Event(), threading.Event()
    out: dict[str, object] = {}

    def session_a() -> None:
        with CloneCheck(analysis_only=True):
            a_in.set()
            b_done.wait(60)

    def session_b() -> None:
        a_in.wait(60)
        k, v = pools_split()
        try:
            with CloneCheck(pools={"k": k, "v": v}, analysis_only=True) as check:
                check.compile(op_commit_late_read)(k, v, *commit_args())
            out["b"] = check.report
        except CheckSessionError as e:
            out["b"] = e
        finally:
            b_done.set()

    threads = [threading.Thread(target=session_a, name="A"), threading.Thread(target=session_b, name="B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert isinstance(out["b"], CheckSessionError) and "thread 'A'" in str(out["b"])
    assert _hooked() == before


def test_sequential_sessions_in_two_threads_both_see_their_clone() -> None:
    """Twin: one after the other, each session finds its own clone."""
    found: list[list[tuple[str, str | None]]] = []

    def one() -> None:
        k, v = pools_split()
        with CloneCheck(pools={"k": k, "v": v}, analysis_only=True) as check:
            check.compile(op_commit_late_read)(k, v, *commit_args())
        assert check.report is not None
        found.append([(c.arg, c.pool) for c in check.report.clones])

    for name in ("A", "B"):
        t = threading.Thread(target=one, name=name)
        t.start()
        t.join(120)
    assert found == [[("v_pool", "v")], [("v_pool", "v")]]


def test_nested_session_is_refused_and_a_failing_session_restores_patches() -> None:
    before = _hooked()
    with CloneCheck(analysis_only=True), pytest.raises(CheckSessionError):
        CloneCheck().__enter__()
    assert _hooked() == before
    k, v = pools_split()
    with pytest.raises(CompileCheckError), CloneCheck(analysis_only=True) as check:
        check.compile(lambda k, v, x: torch.ops.ar_paging.paged_write(k, v, x, x, torch.arange(3)))(
            k, v, torch.randn(16, 2, 8)
        )
    assert _hooked() == before and not hooks._session_lock.locked()


# ---- blind spots --------------------------------------------------------------------------------
def _bypassed_check(bypass: bool, allow: bool = False) -> CloneCheck:
    """Compile op_commit_late_read; ``bypass``: a compile path that never calls post_grad_passes."""
    k, v = pools_split()
    check = CloneCheck(pools={"k": k, "v": v}, analysis_only=True, allow_unanalysed=allow)
    real = compile_fx_module.compile_fx_inner
    with check:
        if bypass:
            compile_fx_module.compile_fx_inner = lambda gm, example_inputs, *a, **kw: backend._run_fx_graph(gm)
        try:
            check.compile(op_commit_late_read)(k, v, *commit_args())
        finally:
            compile_fx_module.compile_fx_inner = real
    return check


def test_a_region_whose_hook_did_not_fire_is_unanalysed_and_fails() -> None:
    report = _bypassed_check(bypass=True).report
    assert report is not None and report.clean  # nothing seen ...
    assert not report.check_passed  # ... is not a pass
    assert len(report.unanalysed) == 1 and "no post-grad graph was observed" in report.unanalysed[0]
    assert "not analysed" in format_report(report)


def test_the_hooked_twin_sees_the_clone_and_allow_unanalysed_accepts_the_bypass() -> None:
    report = _bypassed_check(bypass=False).report
    assert report is not None and report.unanalysed == [] and [c.arg for c in report.clones] == ["v_pool"]
    allowed = _bypassed_check(bypass=True, allow=True).report
    assert allowed is not None and allowed.unanalysed and allowed.check_passed


def test_a_backward_graph_is_listed_as_unanalysed() -> None:
    k, v = pools_split()
    x, slots, window = commit_args()
    w = torch.ones(2, 8, requires_grad=True)

    def train_step(k, v, x, slots, window, w):
        torch.ops.ar_paging.paged_write(k, v, x, x, slots)
        return (x * w).sum() + k[window].sum()

    for with_grad in (True, False):
        check = CloneCheck(pools={"k": k, "v": v}, analysis_only=True)
        with check:
            out = check.compile(train_step)(k, v, x, slots, window, w if with_grad else w.detach())
            if with_grad:
                out.backward()
        report = check.report
        assert report is not None and report.clean
        if with_grad:
            backward = [u for u in report.unanalysed if "backward graph" in u]
            assert backward and not report.check_passed
            assert "torch.inference_mode()" in backward[0] and "requires_grad_(False)" in backward[0]
        else:
            assert report.unanalysed == [] and report.check_passed


def _gm_with_subgraph(mutating: bool) -> torch.fx.GraphModule:
    sub = torch.fx.Graph()
    k, x, slots = sub.placeholder("k"), sub.placeholder("x"), sub.placeholder("slots")
    if mutating:
        sub.call_function(torch.ops.ar_paging.paged_write.default, (k, k, x, x, slots))
    else:
        sub.call_function(torch.ops.aten.add.Tensor, (x, x))
    sub.output(None)
    top = torch.fx.Graph()
    top.get_attr("body_graph_0")
    top.output(None)
    root = torch.nn.Module()
    root.body_graph_0 = torch.fx.GraphModule(torch.nn.Module(), sub)
    return torch.fx.GraphModule(root, top)


def test_a_mutating_op_inside_a_hop_subgraph_makes_the_region_unanalysed() -> None:
    """On torch 2.13 dynamo inlines nested_compile_region bodies that mutate, so no end-to-end
    case keeps one; the analysis of a post-grad graph holding such a subgraph is checked here."""
    spots = subgraph_mutations(_gm_with_subgraph(mutating=True))
    assert spots == [
        "mutating op(s) ar_paging::paged_write inside higher-order-op subgraph 'body_graph_0' are not analysed"
    ]
    assert subgraph_mutations(_gm_with_subgraph(mutating=False)) == []
    probe = backend.Probe()
    region = backend.Region(index=0, compiled_fn_name="__compiled_fn_1")
    region.inner.append(backend.InnerGraph(post_grad_seen=True, blind_spots=[(BlindSpot.HOP_SUBGRAPH, spots[0])]))
    probe.regions.append(region)
    report = build_report(probe, None)
    assert len(report.unanalysed) == 1 and report.unanalysed[0].startswith(f"region 0 (__compiled_fn_1): {spots[0]}")
    assert "to avoid: move the mutating op out of the higher-order op" in report.unanalysed[0]
    assert not report.check_passed
    assert build_report(probe, None, allow_unanalysed=True).check_passed


def test_run_case_fails_on_unanalysed_unless_the_case_allows_it() -> None:
    def case(allow: bool) -> Case:
        k, v = pools_split()
        w = torch.ones(2, 8, requires_grad=True)

        def driver(step):
            out = step(k, v, *commit_args(), w)
            out.backward()
            return out

        def fn(k, v, x, slots, window, w):
            return op_commit_after_gather(k, v, x, slots, window) + (x * w).sum()

        # no_grad=False: a training step (a Case runs its step under torch.no_grad() by default, as an engine does)
        return Case(
            name=f"bw_allow={allow}",
            fn=fn,
            pools={"k": k, "v": v},
            driver=driver,
            allow_unanalysed=allow,
            no_grad=False,
        )

    strict = run_case(case(False), analysis_only=True)
    assert strict.report.unanalysed and not strict.check_passed and not strict.passed
    allowed = run_case(case(True), analysis_only=True)
    assert allowed.check_passed and allowed.passed


def test_phase_timings_are_recorded_per_region() -> None:
    k, v = pools_split()
    with CloneCheck(pools={"k": k, "v": v}, analysis_only=True) as check:
        check.compile(op_commit_after_gather)(k, v, *commit_args())
    report = check.report
    assert report is not None and set(report.region_phase_seconds) == {0}
    phases = report.region_phase_seconds[0]
    assert set(phases) == set(PHASES) and all(t >= 0 for t in phases.values())
    assert phases["post_grad"] > 0 and phases["dynamo"] > 0 and phases["inductor_prep"] > 0
    assert phases["codegen"] == 0 and phases["fx_runner"] > 0  # analysis-only: no codegen ran, and none is shown
