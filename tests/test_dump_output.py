"""``dump`` and the gate's dumps: ``-k``, one folder option, analysis-only dumps with every region's post-grad
graph, an index.md that prices copies per region, and a side-by-side view that never cuts a key line."""

from __future__ import annotations

from pathlib import Path

import pytest

from compile_checks.cli import main
from compile_checks.explain.dumps import excerpt, side_by_side
from compile_checks.gate.commands import select_cases
from compile_checks.gate.plan import plan_targets
from compile_checks.vocab import Mode
from tests._cli_cases import write_engine

LONG = "x" * 90
SOURCE = "\n".join(
    [
        "def forward(self, arg0_1):",
        f"    context = aten.mul(arg0_1, {LONG})",
        f"    clone_default = aten.clone(arg0_1, memory_format = torch.contiguous_format, {LONG})",
        "    return (clone_default,)",
    ]
)


def test_side_by_side_keeps_a_long_key_line_whole_and_cuts_context() -> None:
    rows = excerpt(SOURCE, ["clone_default"], context=1)
    block = side_by_side(rows, rows, ("before", "after"))[3:-1]
    assert all(r[48:51] in (" | ", " |") for r in block)  # the left column stays 48 wide
    assert max(map(len, block)) <= 100  # a docs page's (and a terminal's) 100 columns
    for column in ("".join(r[6:48].rstrip() for r in block), "".join(r[57:].rstrip() for r in block)):
        assert f"memory_format = torch.contiguous_format, {LONG})" in column  # the key line, whole, wrapped
    context = next(r for r in block if "context = " in r)
    assert context.endswith("~") and LONG not in context  # the negative control: a context line is still cut


def test_dump_k_selects_cases_and_a_pattern_matching_none_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = write_engine(tmp_path)
    plan = plan_targets([f"{engine}:gate"], tmp_path, [], mode=Mode.FULL, own_pipeline=True)
    assert [c.label for c in select_cases(plan, ["split"]).cases] == ["split_step"]
    plan = plan_targets([f"{engine}:gate"], tmp_path, [], mode=Mode.FULL, own_pipeline=True)
    assert [c.label for c in select_cases(plan, ["*_control"]).cases] == ["fused_control"]  # a glob
    out = tmp_path / "dumps"
    assert main(["dump", f"{engine}:gate", "--out", str(out), "-k", "nomatch"]) == 2
    err = capsys.readouterr().err
    assert "-k nomatch matches no case; the cases: split_step, fused_control" in err
    assert not out.exists()  # found before anything compiles or is written


def test_dump_has_one_folder_option_and_dump_dir_is_its_deprecated_alias(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = write_engine(tmp_path)
    both = ["dump", f"{engine}:gate", "--out", str(tmp_path / "a"), "--dump-dir", str(tmp_path / "b")]
    assert main(both) == 2 and "give one, not both" in capsys.readouterr().err
    # the alias is taken as --out: the run goes on to the (failing) -k, with a deprecation warning
    assert main(["dump", f"{engine}:gate", "--dump-dir", str(tmp_path / "b"), "-k", "nomatch"]) == 2
    err = capsys.readouterr().err
    assert "--dump-dir is deprecated: use --out" in err and "matches no case" in err
    assert main(["dump", f"{engine}:gate"]) == 2 and "dump needs --out DIR" in capsys.readouterr().err


@pytest.mark.compile
def test_an_analysis_only_dump_of_a_clean_case_has_its_post_grad_graph_and_a_live_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = write_engine(tmp_path)
    dumps = tmp_path / "dumps"
    assert main(["gate", f"{engine}:SPLIT_INSTANCE", "--dump-dir", str(dumps), "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    # capsys' stderr is no terminal: the case's plain line, no bar
    assert "gate [1/1] split_instance pass " in err and "\r" not in err
    folder = dumps / "split_instance"
    post_grad = sorted(folder.glob("__compiled_fn_*.POST_GRAD.*.py"))
    assert post_grad, sorted(p.name for p in folder.iterdir())  # clean, analysis-only: still its graph
    assert "paged_write" in post_grad[0].read_text()
    index = (folder / "index.md").read_text()
    assert f"post_grad_fx: `{post_grad[0].name}`" in index and "CLEAN" in index


def test_index_md_prices_copies_per_region_call_not_summed_across_regions(tmp_path: Path) -> None:
    import torch

    from compile_checks.check.findings import CloneReport, SurvivingClone
    from compile_checks.explain.dumps import render_index

    def clone(region: int, node: str = "") -> SurvivingClone:
        return SurvivingClone(
            op="ar_paging::paged_write",
            arg="v_pool",
            nbytes=131072,
            shape=(32768,),
            dtype=torch.float32,
            region=region,
            node=node or f"clone_{region}",
            pool="layer0.v",
        )

    three = CloneReport(clones=[clone(r) for r in range(3)], num_regions=3, region_calls={0: 2, 1: 2, 2: 2})
    verdict = render_index(three, str(tmp_path)).splitlines()[2]
    assert "131072 B/call in each of 3 regions" in verdict and "786432 bytes over this run" in verdict
    assert "393216" not in verdict  # the three regions' copies are never one call's
    one = CloneReport(clones=[clone(0, "clone_k"), clone(0, "clone_v")], num_regions=1, region_calls={0: 1})
    assert "262144 B/call" in render_index(one, str(tmp_path))  # the control: one region's two copies add up
    # one copy node listed for two pools (a graph called once per layer) runs once per call
    layers = CloneReport(clones=[clone(0), clone(0)], num_regions=1, region_calls={0: 2})
    assert "131072 B/call" in render_index(layers, str(tmp_path)).splitlines()[2]
