"""What a warm Inductor cache serves: the fused-then-split reproducer, per torch version (gate --inductor-cache).

One cache folder is warmed the way production warms it: the fused layout (``kv[0]`` / ``kv[1]`` of one
allocation) compiled once, caches on (in this process: its CPU-ISA probe is done, so only the kernel's
g++ build is paid). Then ``compile-checks gate --inductor-cache DIR`` runs the split layout (the fix)
and the fused one against it: each in a process of its own, reading what the cache serves. On a torch
whose cache keys leave out how inputs alias, split loads the fused artifact (its 64 KiB
``empty_strided`` copy of both halves), and the gate must fail naming the cache; fused, served its own
artifact, agrees with its cold verdict (the negative control: a cache hit alone is no finding). An empty
cache folder serves nothing (the gate's outcome is the cold one), and the cold verdicts are the same
with and without the option.

:data:`SPLIT_LOADS_FUSED` is the observed behaviour per torch minor version; the floor job
(scripts/test_torch_floor.sh) runs this module on its torch too, so a change upstream fails here.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.compile

CASES = Path(__file__).resolve().parent / "_warm_cache_cases.py"
# torch (major, minor) -> does the split layout load the fused layout's artifact from one cache folder?
# 2.14: observed (2.14.0, CPU). 2.13: not observed here; expected the same (alias-aware cache keys had not
# landed upstream): the floor job asserts it on 2.13.0. A later version takes the latest row at or below it.
SPLIT_LOADS_FUSED: dict[tuple[int, int], bool] = {(2, 13): True, (2, 14): True}
FUSED_STORAGE_BYTES = 2 * 64 * 2 * 64 * 4  # both halves: what the fused artifact clones per call


def expected_collision(version: str) -> bool:
    major, minor = (int(p) for p in version.split("+")[0].split(".")[:2])
    known = [v for v in SPLIT_LOADS_FUSED if v <= (major, minor)]
    assert known, f"torch {version} is older than every row of SPLIT_LOADS_FUSED"
    return SPLIT_LOADS_FUSED[max(known)]


@contextlib.contextmanager
def _cache_dir(folder: Path) -> Iterator[None]:
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = old


def warm_fused(folder: Path, name: str = "fused") -> None:
    """The fused layout (or the case ``name``) compiled with the caches on, into ``folder`` (as a first
    production run would: its driver, else one call)."""
    import importlib.util

    import torch._inductor.config as inductor_config

    spec = importlib.util.spec_from_file_location("_warm_cache_cases_warm", CASES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    case = getattr(module, name)()
    torch._dynamo.reset()
    try:
        # under no_grad, as an engine serves (and as a Case runs its step): the grad mode is in the cache key
        with _cache_dir(folder), inductor_config.patch(force_disable_caches=False), torch.no_grad():
            compiled = torch.compile(case.fn, fullgraph=True, dynamic=case.dynamic)
            case.driver(compiled) if case.driver is not None else compiled(*case.args)
    finally:
        torch._dynamo.reset()


def gate(
    capsys: pytest.CaptureFixture[str], *extra: str, cases: tuple[str, ...] = ("split", "fused")
) -> tuple[int, dict[str, dict[str, Any]]]:
    from compile_checks.cli import main

    capsys.readouterr()
    code = main(["gate", *(f"{CASES}:{c}" for c in cases), "--json", "--no-progress", *extra])
    doc = json.loads(capsys.readouterr().out)
    return code, {r["label"]: r for r in doc["cases"]}


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("inductor-cache-fused")
    warm_fused(folder)
    assert any(folder.rglob("*.py")), f"nothing was cached in {folder}"
    return folder


def _listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*"))


def _cold(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["clean"], sorted((c["arg"], c["nbytes"]) for c in row["clones"])


def test_split_loads_fused_per_torch_version(warm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The observed behaviour of this torch matches its row; with a collision the gate fails naming the
    cache and the bytes, and the fused case (served its own artifact) passes: a hit alone is no finding;
    a graph the cache does not hold is neither served nor compiled. The cache folder is never written."""
    before = _listing(warm)
    code, rows = gate(capsys, "--inductor-cache", str(warm), cases=("split", "fused", "other"))
    assert _listing(warm) == before, "the run against the cache wrote into it (or compiled what it did not serve)"
    split, fused, other = rows["split"], rows["fused"], rows["other"]
    # another graph: not served, not compiled, no finding (the cold verdict alone)
    assert other["report"]["inductor_cache"]["graphs"] == [] and other["report"]["inductor_cache"]["missed"] == 1
    assert other["passed"] and not other["verdict"]["failing"]
    served = split["report"]["inductor_cache"]["graphs"]
    copies = [c["nbytes"] for g in served for c in g["copies"]]
    collided = bool(served) and FUSED_STORAGE_BYTES in copies
    record = split["report"]["inductor_cache"]
    assert collided == expected_collision(torch.__version__), (torch.__version__, served, record.get("counters"))
    finding = [f["message"] for f in split["findings"] if f["kind"] == "cache_divergence"]
    # what the scan read of the warm run's trace: the graph came from the caches (their hit records)
    assert all("aotautograd_cache_hit" in g["served_from"] for g in served), (served, record)
    assert all(any(n.startswith("served from the AOTAutograd cache") for n in g["notes"]) for g in served)
    if collided:
        assert code == 1 and not split["passed"]
        assert len(finding) == 1 and str(warm) in finding[0] and f"{FUSED_STORAGE_BYTES} bytes per call" in finding[0]
        assert "in one storage" in finding[0]  # the artifact's harness vs Dynamo's storages
    else:
        assert code == 0 and not finding
    assert fused["report"]["inductor_cache"]["graphs"], "the fused layout was not served its own artifact"
    assert fused["passed"] and not fused["verdict"]["failing"], fused["findings"]
    assert _cold(split) == (True, []) and _cold(fused) == (False, [("v_pool", FUSED_STORAGE_BYTES)])


def test_empty_cache_dir_is_the_cold_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty folder serves nothing: exit 0, no finding, and the cold verdicts of a gate without the option."""
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    code, rows = gate(capsys, "--inductor-cache", str(empty))
    cold_code, cold_rows = gate(capsys)
    assert code == cold_code == 0
    for name in ("split", "fused"):
        assert _cold(rows[name]) == _cold(cold_rows[name])
        assert rows[name]["passed"] and not rows[name]["verdict"]["failing"]
        assert rows[name]["report"]["inductor_cache"]["graphs"] == []
        assert "inductor_cache" not in cold_rows[name]["report"]
    assert _cold(rows["split"]) == (True, [])


def test_case_option_and_table_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``Case(inductor_cache=DIR)`` and ``[tool.compile_checks] inductor_cache`` reach the run (an empty folder:
    a note, the cold verdict); a case without either has no ``inductor_cache`` record (the negative control)."""
    from compile_checks.cli import main

    empty = tmp_path / "own-cache"
    empty.mkdir()
    (tmp_path / "cases.py").write_text(
        f"import sys\nsys.path.insert(0, {str(CASES.parent)!r})\nfrom _warm_cache_cases import split\n\n"
        f"def own():\n    return split().replace(name='own', inductor_cache={str(empty)!r})\n"
    )
    table = tmp_path / "pyproject.toml"
    table.write_text(f'[tool.compile_checks]\ntargets = ["{CASES}:split"]\ninductor_cache = "own-cache"\n')
    capsys.readouterr()
    assert main(["gate", f"{tmp_path / 'cases.py'}:own", f"{CASES}:fused", "--json", "--no-progress"]) == 0
    own, fused = json.loads(capsys.readouterr().out)["cases"]
    assert own["inductor_cache"] == str(empty) and own["report"]["inductor_cache"]["graphs"] == []
    assert any("empty, nothing served" in n for n in own["notes"])
    assert fused["inductor_cache"] is None and "inductor_cache" not in fused["report"]
    assert main(["gate", "--config", str(table), "--json", "--no-progress"]) == 0
    (split,) = json.loads(capsys.readouterr().out)["cases"]
    assert split["inductor_cache"] == str(empty.resolve())


@pytest.mark.slow
def test_own_recompiled_symbolic_artifact_is_no_divergence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fused case driven with pools of 48, 56 and 64 slots (a static graph, then a symbolic one called twice),
    run against a cache warmed by itself: the served code is the cold code, so no finding. The symbolic graph's
    copy is evaluated at its calls' sizes (never dropped); the negative control: the same record with that
    evaluation taken out reads as a divergence, as it did before."""
    from compile_checks.gate.warm_cache import divergence

    folder = tmp_path / "inductor-cache-grown"
    warm_fused(folder, "grown")
    code, rows = gate(capsys, "--inductor-cache", str(folder), cases=("grown",))
    grown = rows["grown"]
    record = grown["report"]["inductor_cache"]
    assert code == 0 and grown["passed"] and not grown["verdict"]["failing"], (grown["findings"], record)
    cold = [*grown["clones"], *grown["other_clones"]]
    cold_bytes = sorted({c["nbytes"] for c in cold})
    symbolic = [c for g in record["graphs"] for c in g["copies"] if isinstance(c["nbytes"], str)]
    assert symbolic and all(c["nbytes_per_call"] for c in symbolic), record
    evaluated = sorted({n for c in symbolic for n in c["nbytes_per_call"]})
    assert set(evaluated) <= set(cold_bytes) and len(cold_bytes) == 3, (evaluated, cold_bytes)
    dropped = {
        **record,
        "graphs": [{**g, "copies": [{**c, "nbytes_per_call": []} for c in g["copies"]]} for g in record["graphs"]],
    }
    assert divergence(cold, dropped, str(folder)) is None  # unevaluated: nothing claimed either way
    only_static = {
        **record,
        "graphs": [g for g in record["graphs"] if not any(isinstance(c["nbytes"], str) for c in g["copies"])],
    }
    lacking = divergence(cold, only_static, str(folder))
    assert lacking is not None and f"lacks {sum(evaluated)} bytes per call" in lacking


def test_own_window_artifact_is_no_divergence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The window pattern (read the window, slice-write the chunk, use the old window; static sizes, 3 chunks)
    run against a cache its own production run warmed: every graph is served, its code has no cache-sized
    buffer, and a cold copy it lacks that analysis-only could not settle (an upper bound: Inductor's buffer
    choice, which that code settles) is no ``cache_divergence``: the outcome is the cold one. The negative
    control: the same served record against a certain cold copy of those 768 bytes is a divergence."""
    from compile_checks.gate.warm_cache import divergence

    folder = tmp_path / "inductor-cache-window"
    warm_fused(folder, "window")
    code, rows = gate(capsys, "--inductor-cache", str(folder), cases=("window",))
    cold_code, cold_rows = gate(capsys, cases=("window",))
    row, record = rows["window"], rows["window"]["report"]["inductor_cache"]
    assert len(record["graphs"]) == 3 and not record["missed"], record  # one graph per chunk, each served
    assert all(g["copies"] == [] for g in record["graphs"]), record
    assert not [e for e in row["check_errors"] if e.startswith("cache_divergence")], row["check_errors"]
    assert (code, row["passed"], _cold(row)) == (cold_code, cold_rows["window"]["passed"], _cold(cold_rows["window"]))
    assert all(c["upper_bound"] for c in [*row["clones"], *row["other_clones"]]), row["clones"]
    cache_bytes = 1 * 12 * 2 * 8 * 4  # the [1, 12, 2, 8] float32 cache
    copy = {"op": "aten::slice_scatter", "arg": "self", "input": "arg0_1", "nbytes": cache_bytes}
    assert divergence([{**copy, "upper_bound": True}], record, str(folder)) is None
    lacking = divergence([{**copy, "upper_bound": False}], record, str(folder))
    assert lacking is not None and f"lacks {cache_bytes} bytes per call" in lacking
