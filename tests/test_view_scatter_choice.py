"""A view scatter read only through sub-views: Inductor's choice, settled by a full compile's code.

Self-Forcing's fused twin writes ``cache[:, a:b] = x`` then reads ``cache[:, :end]``. While ``end`` is
short of the cache, Inductor computes the scatter inside its readers and the write-back (no buffer);
the last chunk reads all of it and gets a cache-sized buffer. The post-grad graph cannot tell: a full
compile, and analysis-only (which has Inductor generate the code of each graph holding such a scatter,
no kernel built), keep exactly the buffers its generated code allocates. Truth: the pool-sized allocations
in that code. Negative control: with no code generated, every scatter is undecided, not those buffers.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.fx
from _checks import pool_sized_allocations, without_generated_code
from _self_forcing import self_forcing_case

from compile_checks.case import CaseResult, run_case
from compile_checks.check.graph import generated_buffers
from compile_checks.check.graph.aten_writes import _scattered_writes
from compile_checks.check.graph.generated_buffers import allocated_bytes, settle_inductors_choices
from compile_checks.check.graph.geometry import TensorGeometry
from compile_checks.check.graph.sites import CloneSite
from compile_checks.scan.command import scan_paths
from compile_checks.scan.inputs import PoolMap
from compile_checks.vocab import CopyKind

CHUNKS = 3  # caches of 3 chunks x 4 tokens: 768 B, a size no activation of this stack has
# static shapes: the truth counts cache-sized allocations by their literal size; under torch.compile's
# default (dynamic=None) the recompiled chunks allocate symbolic sizes this count cannot read
STATIC = {"dynamic": False}
CACHE_BYTES = CHUNKS * 4 * 2 * 8 * 4


def _copies_by_region(result) -> Counter[int]:
    return Counter(region for region, _node in {(c.region, c.node) for c in result.report.clones})


def _code_buffers_by_region(result) -> Counter[int]:
    out: Counter[int] = Counter()
    for region, sources in result.report.sources.items():
        for code in sources.generated:
            out[region] += len([b for b in pool_sized_allocations(code, CACHE_BYTES) if b == CACHE_BYTES])
    return +out


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[CaseResult, Path]:
    """The full compile, with torch's structured trace on (what ``compile-checks scan`` reads)."""
    from torch._logging._internal import LazyTraceHandler, TorchLogsFormatter, trace_log

    out = tmp_path_factory.mktemp("sff_trace")
    handler = LazyTraceHandler(str(out))
    handler.setFormatter(TorchLogsFormatter(trace=True))
    level = trace_log.level
    trace_log.setLevel(logging.DEBUG)
    trace_log.addHandler(handler)
    try:
        result = run_case(self_forcing_case("sff", layout="fused", chunks=CHUNKS, **STATIC), analysis_only=False)
    finally:
        trace_log.removeHandler(handler)
        trace_log.setLevel(level)
        handler.close()
    return result, out


@pytest.fixture(scope="module")
def full_result(traced: tuple[CaseResult, Path]) -> CaseResult:
    return traced[0]


@pytest.mark.compile
def test_full_compile_counts_copies_only_where_the_generated_code_allocates_a_cache(full_result) -> None:
    """Per region: copies only where the code allocates a cache-sized buffer, never more copies than such
    buffers (the last chunk's code also allocates the whole-window K/V for SDPA: cache-sized too)."""
    assert full_result.passed and not full_result.report.clean
    truth, copies = _code_buffers_by_region(full_result), _copies_by_region(full_result)
    assert set(copies) == set(truth) and all(copies[r] <= truth[r] for r in copies)
    settled = [n for n in full_result.report.notes if "Inductor computed it inside its readers" in n]
    assert len(settled) == 2 * (CHUNKS - 1)  # K and V of every chunk but the last (whose reader is whole)


@pytest.fixture(scope="module")
def fast_result() -> CaseResult:
    return run_case(self_forcing_case("sff", layout="fused", chunks=CHUNKS, **STATIC), analysis_only=True)


@pytest.mark.compile
def test_analysis_only_settles_each_choice_as_the_generated_code(fast_result, full_result) -> None:
    """The gate's default mode: the same copies per region as the full compile's code, none undecided."""
    assert fast_result.passed and not fast_result.report.clean and not fast_result.report.undecided
    assert _copies_by_region(fast_result) == _copies_by_region(full_result)
    assert not any(c.upper_bound for c in fast_result.report.clones)
    settled = [n for n in fast_result.report.notes if "Inductor computed it inside its readers" in n]
    assert len(settled) == 2 * (CHUNKS - 1)


@pytest.mark.compile
def test_negative_control_with_no_generated_code_every_choice_is_undecided(full_result, monkeypatch) -> None:
    """Unsettled (no code generated), the comparison above fails: no copy at all, every scatter undecided; the
    negative control then fails (no copy), as it must. Both runs compile the same regions in the same order."""
    without_generated_code(monkeypatch)
    unsettled = run_case(self_forcing_case("sff", layout="fused", chunks=CHUNKS, **STATIC), analysis_only=True)
    assert list(unsettled.report.sources) == list(full_result.report.sources)
    assert unsettled.report.clean and not unsettled.passed  # a negative control: never passed by an upper bound
    assert _copies_by_region(unsettled) != _code_buffers_by_region(full_result)
    assert len({(c.region, c.node) for c in unsettled.report.undecided}) == 2 * CHUNKS  # each for every layer
    assert len([n for n in unsettled.report.notes if "undecided" in n]) == 2 * CHUNKS


@pytest.mark.compile
def test_the_scan_of_the_trace_settles_as_the_live_check(traced: tuple[CaseResult, Path]) -> None:
    """The trace logs the output code: the scan keeps the same copies and notes the same settled ones."""
    result, trace = traced
    scans = scan_paths([trace], PoolMap({}))
    assert not [s.error for s in scans if s.error]
    # the stack's no-op graphs (``x.type_as(v)``): no post-grad graph logged, no error either (an AOT graph
    # with calls and no post-grad graph still is one: test_scan_agreement.test_analysis_only_trace_is_an_error)
    assert any("Inductor lowers nothing" in n for s in scans for n in s.notes)
    scanned = [(c["node"], c["nbytes"]) for s in scans for c in s.copies]
    live = [(node, nbytes) for _r, node, nbytes in sorted({(c.region, c.node, c.nbytes) for c in result.report.clones})]
    assert sorted(scanned) == sorted(live) and len(live) == 2
    settled = [n for s in scans for n in s.notes if "Inductor computed it inside its readers" in n]
    assert len(settled) == 2 * (CHUNKS - 1)


def test_the_split_stack_has_no_choice_to_settle() -> None:
    """The clean stack writes its caches in place: nothing counted, nothing noted."""
    r = run_case(self_forcing_case("sf", chunks=CHUNKS, **STATIC), analysis_only=True)
    assert r.report.clean and not [n for n in r.report.notes if "sub-views" in n]


# ---- the parser and the settlement on plain data -----------------------------------------------------

WRAPPER = """
def call(args):
    arg0_1, = args
    buf0 = empty_strided_cpu((1, 12, 2, 8), (192, 16, 8, 1), torch.float32)
    buf1 = empty_strided_cpu((4, 4), (4, 1), torch.float64)
    buf2 = buf0; del buf0  # reuse
    return (buf2, )
"""


def _site(node: str, nbytes: int, choice: bool) -> CloneSite:
    geo = TensorGeometry(shape=(nbytes // 4,), stride=(1,), storage_offset=0, dtype=torch.float32)
    return CloneSite(
        op="aten::slice_scatter", arg="self", clone_node=node, placeholder="arg0_1", placeholder_index=0,
        clone=geo, view=geo, clone_source_offset=0, clones_whole_input=False,
        kind=CopyKind.ATEN_WRITE_COPY, buffer_is_inductors_choice=choice,
    )  # fmt: skip


def test_allocated_bytes_counts_allocations_and_reuses() -> None:
    assert allocated_bytes(WRAPPER) == Counter({768: 2, 128: 1})
    assert allocated_bytes(WRAPPER.replace("(1, 12, 2, 8)", "(1, s0, 2, 8)")) == Counter({None: 2, 128: 1})
    assert allocated_bytes('extern "C" void kernel(...)') is None  # not a Python wrapper


def test_settlement_keeps_what_the_code_allocates_and_drops_only_choices() -> None:
    certain, choice, other = _site("a", 768, False), _site("b", 768, True), _site("c", 768, True)
    kept, notes = settle_inductors_choices([certain, choice, other], WRAPPER)  # two 768 B buffers
    assert kept == [certain, choice] and len(notes) == 1 and notes[0].startswith("c: ")
    one_buffer = WRAPPER.replace("    buf2 = buf0; del buf0  # reuse\n", "")
    assert settle_inductors_choices([certain, choice], one_buffer)[0] == [certain]  # certain sites are never dropped
    assert settle_inductors_choices([certain], "def call(args):\n    pass\n") == ([certain], [])


def test_allocated_bytes_follows_reuses_of_reinterpreted_buffers() -> None:
    """paged_lm's wrapper: ``buf13 = buf12; del buf12  # reuse`` where ``buf12 = reinterpret_tensor(buf10, ...)``
    and ``buf10`` reinterprets ``buf5``: the reuse is ``buf5``'s 256 bytes, not a buffer of unknown (symbolic)
    size that would confirm every choice. A reuse of a name the code never sized stays a doubt."""
    code = WRAPPER.replace(
        "    buf2 = buf0; del buf0  # reuse\n",
        "    buf3 = reinterpret_tensor(buf1, (16, 8), (8, 1), 0); del buf1  # reuse\n"
        "    buf4 = reinterpret_tensor(buf3, (128,), (1,), 0); del buf3  # reuse\n"
        "    buf5 = buf4; del buf4  # reuse\n",
    )
    assert allocated_bytes(code) == Counter({768: 1, 128: 2})
    unknown = code.replace("buf3 = reinterpret_tensor(buf1,", "buf3 = reinterpret_tensor(buf9,")
    assert allocated_bytes(unknown) == Counter({768: 1, 128: 1, None: 1})


def test_settlement_gives_a_spare_buffer_to_an_earlier_scatter_of_the_chain() -> None:
    """paged_lm's generated code has one 4096-byte buffer for the chain ``select_scatter_default_1/3/5/7``:
    ``select_scatter_default_5``'s (``buf17``); the last scatter, the one the write-back copies, is computed
    inside the write-back's kernel (``cpp_fused_add_copy__5`` stores it straight into the input)."""
    written = TensorGeometry(shape=(192,), stride=(1,), storage_offset=0, dtype=torch.float32)
    last = dataclasses.replace(_site("last", 768, True), written=(written,))
    earlier = _site("earlier", 768, True)
    one_buffer = WRAPPER.replace("    buf2 = buf0; del buf0  # reuse\n", "")
    kept, notes = settle_inductors_choices([last, earlier], one_buffer)
    assert kept == [earlier] and [n.split(":")[0] for n in notes] == ["last"]
    assert settle_inductors_choices([last, earlier], WRAPPER)[0] == [last, earlier]  # two buffers: both, in order


def test_a_scatter_feeds_only_what_it_scatters_not_the_state_it_scatters_into() -> None:
    """Two writes through views of one buffer (paged_lm's K then V): the second scatter's ``self`` is the first
    scatter's result, the input's state before it; that state is the first site's value, never the second's feed
    (else the second site claims the first one's buffer when the code is settled by identity)."""
    aten = torch.ops.aten

    def two_writes(kv: torch.Tensor, i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        a = aten.select_scatter.default(kv, aten.index_put.default(aten.select.int(kv, 0, 0), [i], x), 0, 0)
        b = aten.select_scatter.default(a, aten.index_put.default(aten.select.int(a, 0, 1), [i], x), 0, 1)
        return aten.copy_.default(kv, b)

    graph = torch.fx.symbolic_trace(two_writes).graph
    feeds = {n.name: _scattered_writes(n) for n in graph.nodes if n.name.startswith("select_scatter")}
    assert feeds == {
        "select_scatter_default": ("index_put_default",),
        "select_scatter_default_1": ("index_put_default_1",),
    }


def test_settlement_never_drops_on_a_doubt() -> None:
    choice = _site("b", 768, True)
    symbolic = WRAPPER.replace("(4, 4), (4, 1)", "(s0, 4), (4, 1)").replace("(1, 12, 2, 8)", "(1, 2, 2, 8)")
    assert settle_inductors_choices([choice], symbolic) == ([choice], [])  # a symbolic buffer may be it
    assert settle_inductors_choices([choice], "void call() {}") == ([choice], [])  # cpp_wrapper code: unread
    assert "settle_inductors_choices" in generated_buffers.__all__


# ---- why such a scatter is a copy: the replay of Inductor's reinplace rules ----------------------------


@pytest.mark.compile
def test_the_fused_twins_scatters_are_explained_by_their_later_reads(fast_result, full_result) -> None:
    """Each K/V scatter is a copy because the old cache is read after the write (the stack's gather-first
    bug), named with its own reader: K's and V's readers differ. Was ``other: no reinplace decision``."""
    from compile_checks.vocab import Cause

    for result in (fast_result, full_result):
        for clone in result.report.clones:
            e = clone.explanation
            assert e is not None and e.cause == Cause.READ_AFTER_WRITE, (clone.node, e)
            assert "_self_forcing.py:" in e.reason and clone.pool in e.reason
        readers = {c.node: c.explanation.reason.split(" by `")[1].split("`")[0] for c in result.report.clones}
        assert len(set(readers.values())) == 2  # slice_scatter_default (K) and slice_scatter_default_1 (V)


def _scatter_graph(read_after: bool) -> torch.fx.Graph:
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        before = k[2:4] * 2
        new = torch.slice_scatter(k, x, 0, 0, 2)
        after = k[2:4] * 3 if read_after else before
        k.copy_(new)
        return after

    return make_fx(step, tracing_mode="fake")(torch.zeros(8, 4), torch.ones(2, 4)).graph


def test_the_replay_refuses_a_view_scatter_only_for_a_later_read() -> None:
    from compile_checks.explain.refusals import explain_refusals
    from compile_checks.vocab import Cause

    (late,) = explain_refusals(_scatter_graph(read_after=True))
    assert late.cause == Cause.READ_AFTER_WRITE and late.op == "aten::slice_scatter" and late.args == ("self",)
    assert {(r.node, r.op) for r in late.readers} == {("mul_1", "aten::mul")}  # the later read, not `mul`
    (early,) = explain_refusals(_scatter_graph(read_after=False))  # negative control: nothing read after it
    assert early.cause == Cause.OTHER and "no reinplace rule refuses it" in early.detail
