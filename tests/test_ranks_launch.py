"""Ranks as processes: a rank that raises or hangs is an error naming it with its log tail, within the timeout.

Each test starts 2 real processes under gloo (forked from the preloaded server: tests/test_ranks_forked.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import _ranks_factories as factories
import pytest

from compile_checks.ranks import RankedCase, launcher, run_ranked
from compile_checks.ranks.forked import can_fork, start_server
from compile_checks.ranks.launcher import PEER_GRACE_S, RankRun, rank_end_seconds
from compile_checks.ranks.merge import RankedResult


def test_a_rank_that_raises_is_an_error_with_its_traceback_listed_first() -> None:
    result = run_ranked(RankedCase("raises", factories.rank1_raises, timeout_s=120), analysis_only=True)
    assert result.clean is None and not result.passed
    first, peer = result.errors  # the rank that failed first leads
    assert first.startswith("rank 1 raised RuntimeError: rank 1 cannot build its shard (deliberate)")
    assert "Traceback" in first  # the tail of rank 1's log
    assert peer.startswith("rank 0 ")  # gloo saw its peer's connection close in the barrier, or it was stopped
    assert result.verdict.startswith("ERROR: rank 1 raised")


def test_a_peer_that_does_not_notice_is_stopped_after_the_grace_not_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The grace shortened from the launcher's 5 s to 1 s (read when a rank fails): the test waits it out
    with an idle core. Stopped after the grace means no sooner than it, and long before the timeout."""
    grace = 1.0
    monkeypatch.setattr(launcher, "PEER_GRACE_S", grace)
    result = run_ranked(RankedCase("busy", factories.rank1_raises_rank0_busy, timeout_s=120), analysis_only=True)
    first, peer = result.errors
    assert first.startswith("rank 1 raised RuntimeError")
    assert peer.startswith("rank 0 stopped: another rank failed first")
    assert result.runs[0].returncode is None
    assert grace <= result.wall_seconds < 60 and PEER_GRACE_S < 60  # the peer's grace, not the 120 s timeout


def test_a_factory_that_returns_no_case_is_an_error_of_each_rank() -> None:
    result = run_ranked(RankedCase("nocase", factories.not_a_case, timeout_s=60), analysis_only=True)
    assert len(result.errors) == 2 and all("returned dict, not a Case" in e for e in result.errors)


def test_ranks_seen_ending_in_one_poll_are_ordered_by_their_own_ends() -> None:
    """Rank 1 raised at 2.0 s; rank 0 failed at 2.1 s because of it; the launcher saw both gone at 2.2 s.
    Negative control: ordered by what the launcher saw, rank 0 (the consequence) would lead."""
    launched_at = 1000.0
    results = {
        0: {"rank": 0, "error": "E: peer closed", "ended_at": 1002.1},
        1: {"rank": 1, "error": "E: deliberate", "ended_at": 1002.0},
    }
    runs = [RankRun(r, 1, rank_end_seconds(2.2, results[r], launched_at), "", results[r]) for r in (0, 1)]
    result = RankedResult(RankedCase("x", factories.not_a_case), "gloo", runs, 3.0, True)
    assert [e.split()[1] for e in result.errors] == ["1", "0"]
    seen_only = [RankRun(r, 1, 2.2, "", results[r]) for r in (0, 1)]
    assert [
        e.split()[1] for e in RankedResult(RankedCase("x", factories.not_a_case), "gloo", seen_only, 3.0, True).errors
    ] == ["0", "1"]
    assert rank_end_seconds(7.5, None, launched_at) == 7.5  # no result (killed, crashed): what the launcher saw
    assert rank_end_seconds(7.5, {"rank": 0}, launched_at) == 7.5  # a result without its end (an older worker)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_gloo_ranks_wait_for_every_peers_connection_before_going_on(backend: str) -> None:
    """gloo connects its full mesh inside ``init_process_group``: a rank that returns from it and fails at once
    (a factory that raises) broke a peer still connecting, which was then reported for the wrong reason (5 of
    30 tries of the no-case test under load). Each gloo rank waits in a barrier first; nccl, which connects
    at its first collective, does not. Negative control: nccl's order has no barrier, so the check can tell."""
    from unittest import mock

    import torch.distributed as dist

    from compile_checks.ranks.worker import _init_group

    calls: list[str] = []
    job = {"backend": backend, "rank": 0, "world_size": 2, "init_method": "tcp://127.0.0.1:1", "timeout_s": 5}
    with (
        mock.patch.object(dist, "init_process_group", side_effect=lambda *a, **k: calls.append("init")),
        mock.patch.object(dist, "barrier", side_effect=lambda *a, **k: calls.append("barrier")),
        mock.patch("torch.cuda.set_device"),
        mock.patch("torch.cuda.device_count", return_value=1),
        mock.patch("torch.set_num_threads"),
    ):
        _init_group(job)
    assert calls == (["init", "barrier"] if backend == "gloo" else ["init"])


HANG_TIMEOUT_S = 8  # rank 0's tiny analysis-only case takes ~1-2 s from the fork server


class _Background:
    """``run_ranked`` of the hang case in a thread: its 8 s are mostly rank 1 asleep, so the module's
    other ranked tests run meanwhile (the module is one unit of work on one xdist worker: _scheduling)."""

    def __init__(self) -> None:
        self.result: RankedResult | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.thread = threading.Thread(target=self._run, name="hang-case", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            # the fork server up first: a launch's timeout counts from before its ranks start, and the
            # server's first start (its preload) would otherwise eat into rank 1's 8 s before it prints
            if can_fork("gloo"):
                start_server()
            t0 = time.perf_counter()
            self.result = run_ranked(
                RankedCase("hangs", factories.rank1_hangs, timeout_s=HANG_TIMEOUT_S), analysis_only=True
            )
            self.seconds = time.perf_counter() - t0
        except BaseException as e:  # re-raised by the test
            self.error = e


@pytest.fixture(scope="module", autouse=True)
def hang_case_running() -> Iterator[_Background]:
    """Started before the module's first test; the hang test waits for it."""
    background = _Background()
    yield background
    background.thread.join(timeout=120)


@pytest.mark.compile  # rank 0 compiles its tiny case
def test_a_rank_that_hangs_is_killed_at_the_timeout_and_reported_hung(hang_case_running: _Background) -> None:
    hang_case_running.thread.join(timeout=120)
    assert not hang_case_running.thread.is_alive(), "the hang case's launcher did not return in 120 s"
    if hang_case_running.error is not None:
        raise hang_case_running.error
    result = hang_case_running.result
    assert result is not None and hang_case_running.seconds < 40
    assert result.clean is None and not result.passed
    hung = [e for e in result.errors if e.startswith("rank 1 ")]
    assert len(hung) == 1 and hung[0].startswith(f"rank 1 still running at the timeout ({HANG_TIMEOUT_S} s): hung?")
    assert "rank 1 is about to hang" in hung[0]  # its log tail
    assert result.runs[1].returncode is None and result.runs[1].stopped_because is not None
    # rank 0 reached its own verdict, unless a loaded box kept it from finishing its compile within the timeout
    assert result.results.get(0, {}).get("clean") is True or any(
        e.startswith("rank 0 still running") for e in result.errors
    )
