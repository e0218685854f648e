"""Issue 50's wrong words: the absolute diff said as absolute, ``dump``'s progress as dump's, no empty stderr
block, the JSON's ``case`` as the table says it, a scan's copy named by its input (not the op's argument),
and a ``shared_storage`` fix worded by the pools' own names for caches that are not K and V."""

from __future__ import annotations

import io

import pytest
import torch

from compile_checks.findings import Evidence, collect_findings
from compile_checks.gate.outcome import Outcome
from compile_checks.gate.stderr_noise import HeldStderr
from compile_checks.gate.timing import progress_callback
from compile_checks.verdict import copy_names


def _outcome() -> Outcome:
    return Outcome("fused", "cases.py:cases/stock", "stock", True, True, clean=True, wall_seconds=1.0)


def test_the_diff_verify_returns_is_said_as_absolute() -> None:
    (finding,) = [f for f in collect_findings(Evidence(eager_match=False, max_abs_diff=0.596)) if f.kind == "mismatch"]
    assert finding.message == "compiled != eager (max absolute diff 0.596)"


def test_dump_progress_says_dump() -> None:
    stream = io.StringIO()
    on_done, close = progress_callback(4, True, stream=stream, command="dump")
    assert on_done is not None
    on_done(_outcome())
    close()
    assert stream.getvalue().startswith("dump [1/4] fused pass")


def test_blank_held_stderr_shows_no_block(capsys: pytest.CaptureFixture[str]) -> None:
    held = HeldStderr()
    held.text = "\n  \n"
    held.show(failed=True)
    assert capsys.readouterr().err == ""
    held.text = "\nwarning: real\n\n"
    held.show(failed=True)
    err = capsys.readouterr().err
    assert "(1 lines)" in err and "warning: real\n--- end" in err


def test_json_names_the_case_as_the_table_does() -> None:
    d = _outcome().to_dict()
    assert d["case"] == d["label"] == "fused"


def test_a_copy_without_a_pool_is_named_by_its_input_not_the_ops_argument() -> None:
    copies = [{"pool": None, "input": "L['v_pools'][0]", "arg": "v_pool"}]
    assert copy_names(copies) == "L['v_pools'][0]"
    assert copy_names([{"pool": "layer0.v", "input": "L['v_pools'][0]", "arg": "v_pool"}]) == "layer0.v"


@pytest.mark.compile
def test_shared_storage_fix_names_latent_and_rope_caches_not_k_and_v() -> None:
    import ar_paging  # noqa: F401  (registers torch.ops.ar_paging.paged_write)
    from compile_checks.api import analyze_pool_clones
    from compile_checks.explain.explanations import looks_like_kv

    def step(latent, rope, new_latent, new_rope, slots):
        torch.ops.ar_paging.paged_write(latent, rope, new_latent, new_rope, slots)
        return latent.index_select(0, slots).sum() + rope.index_select(0, slots).sum()

    both = torch.zeros(2, 64, 2, 8)
    new = (torch.randn(4, 2, 8), torch.randn(4, 2, 8), torch.arange(4))
    pools = {"layer0.latent": both[0], "layer0.rope": both[1]}
    report = analyze_pool_clones(step, both[0], both[1], *new, pools=pools, analysis_only=True)
    (clone,) = report.clones
    assert clone.explanation.cause == "shared_storage"
    fix = clone.explanation.fix
    assert "(layer0.rope)" in fix and "(layer0.latent)" in fix, fix
    assert "K and V" not in fix and "allocate_kv_pool_with_views" not in fix
    assert looks_like_kv("layer0.k", "v_pool") and not looks_like_kv("layer0.latent", "layer0.rope")


def test_a_100_column_table_keeps_pool_names_whole() -> None:
    """The README's first transcript (COLUMNS=100) folded ``layer0.v,laye`` / ``r1.v``: each part of the
    verdict is a line of its own, so the column folds between them."""
    from rich.console import Console

    from compile_checks.gate.outputs import verdict_table

    o = Outcome("fused", "t/stock", "stock", True, True, clean=False, wall_seconds=0.7, eager_match=True)
    o.clones = [
        {"pool": f"layer{n}.v", "arg": "v_pool", "nbytes": 8192 * (n + 1), "region": 0, "node": f"clone_{n}"}
        for n in range(2)
    ]
    o.report = {"clone_bytes_per_run": 73728, "recompiles": {}}
    console = Console(width=100, record=True)
    console.print(verdict_table([o], "compile-checks gate"))
    text = console.export_text()
    assert "layer0.v,layer1.v" in text and max(map(len, text.splitlines())) <= 100
