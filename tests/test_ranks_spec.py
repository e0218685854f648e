"""RankedCase and FactoryRef: the declaration the gate plans with, and how a rank finds its factory again."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from compile_checks.ranks import FactoryRef, RankedCase, RankedCaseError

HERE = Path(__file__).parent


def module_factory(rank: int, world_size: int) -> None:
    return None


def test_expectation_per_rank_and_merged() -> None:
    every = RankedCase("a", module_factory, world_size=3, expect_clean=False)
    assert [every.expectation(r) for r in range(3)] == [False, False, False]
    asym = RankedCase("b", module_factory, world_size=2, expect_clean_by_rank=(True, False))
    assert asym.expect_clean is False  # the gate's "expected" column: not every rank clean
    assert [asym.expectation(r) for r in range(2)] == [True, False]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"world_size": 0}, "world_size"),
        ({"expect_clean_by_rank": (True,)}, "one bool per rank"),
        ({"expect_clean": False, "expect_clean_by_rank": (True, True)}, "contradicts"),
        ({"pipeline": "nope"}, "pipeline"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_malformed_ranked_case_is_an_error(kwargs: dict, match: str) -> None:
    with pytest.raises(RankedCaseError, match=match):
        RankedCase("bad", module_factory, **kwargs)


def test_a_factory_a_rank_cannot_import_again_is_refused_up_front() -> None:
    def nested(rank: int, world_size: int) -> None:
        return None

    with pytest.raises(RankedCaseError, match="module level"):
        RankedCase("nested", nested)
    with pytest.raises(RankedCaseError, match="module level"):
        RankedCase("lambda", lambda r, w: None)


def test_factory_ref_loads_a_file_target_and_a_module_function(tmp_path: Path) -> None:
    (tmp_path / "helper_mod.py").write_text("VALUE = 7\n")
    (tmp_path / "my_cases.py").write_text(
        "from helper_mod import VALUE\n\ndef make(rank, world_size):\n    return (VALUE, rank, world_size)\n"
    )
    ref = FactoryRef.of("my_cases.py:make", base_dir=tmp_path)
    assert ref.file == str((tmp_path / "my_cases.py").resolve())
    try:
        assert ref.load()(1, 2) == (7, 1, 2)  # loaded by file, its folder on sys.path for its sibling
    finally:
        sys.modules.pop(ref.module, None)
        sys.modules.pop("helper_mod", None)
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]
    by_function = FactoryRef.of(module_factory)
    assert by_function.name == "module_factory" and by_function.load() is module_factory


def test_factory_ref_falls_back_to_the_file_when_the_module_is_not_importable_by_name() -> None:
    ref = FactoryRef("no_such_module_anywhere", "module_factory", str(Path(__file__).resolve()))
    try:
        assert ref.load()(0, 1) is None
    finally:
        sys.modules.pop("no_such_module_anywhere", None)


def test_factory_ref_names_a_missing_attribute(tmp_path: Path) -> None:
    (tmp_path / "empty_cases.py").write_text("X = 1\n")
    ref = FactoryRef.of("empty_cases.py:make", base_dir=tmp_path)
    try:
        with pytest.raises(RankedCaseError, match="no attribute 'make'"):
            ref.load()
        with pytest.raises(RankedCaseError, match="not a callable"):
            FactoryRef(ref.module, "X", ref.file).load()
    finally:
        sys.modules.pop(ref.module, None)
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


def test_a_target_may_return_ranked_cases_but_the_traffic_report_refuses_them(tmp_path: Path) -> None:
    from compile_checks.gate.targets import TargetError, load_target, load_targets

    (tmp_path / "ranked_cases.py").write_text(
        "from compile_checks.ranks import RankedCase\n\n"
        "def make(rank, world_size):\n    return None\n\n"
        "def cases():\n    return [RankedCase('tp', make, world_size=2)]\n"
    )
    (ranked,) = load_target("ranked_cases.py:cases", tmp_path)
    assert isinstance(ranked, RankedCase) and ranked.factory_ref().file == str((tmp_path / "ranked_cases.py").resolve())
    with pytest.raises(TargetError, match="per-rank cases run in the gate only"):
        load_targets(["ranked_cases.py:cases"], tmp_path)
