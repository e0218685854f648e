"""``[tool.compile_checks]`` and ``[tool.compile_checks.scan]`` are pydantic models: every bad table is a usage
error naming the file and the key, as clearly as the hand-written checks said it.

Negative controls: the valid tables (every key, relative paths taken from the file's folder) load, and a key
left unset keeps its default.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compile_checks.errors import UsageError
from compile_checks.gate.config import ConfigError, GateConfig, load_config
from compile_checks.scan.config import ScanConfig, load_scan_config
from compile_checks.vocab import Pipeline


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "sub").mkdir(exist_ok=True)
    path = tmp_path / "sub" / "pyproject.toml"
    path.write_text(text)
    return path


def test_a_valid_table_loads_with_paths_from_its_folder(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[tool.compile_checks]\ntargets = ["cases.py:cases"]\npipelines = ["stock", "vllm"]\nfull = true\n'
        'junitxml = "out/j.xml"\ndump_dir = "dumps"\ninductor_cache = "cache"\n'
        '[tool.compile_checks.scan]\nexpect_clean = false\ngraphs = {"0/1" = true}\npools = {"l0.v" = false}\n'
        'pools_file = "pools.toml"\n',
    )
    config = load_config(path)
    assert config is not None and config.path == path and config.base_dir == path.parent
    assert config.targets == ("cases.py:cases",) and config.pipelines == (Pipeline.STOCK, Pipeline.VLLM)
    assert config.full is True and config.junitxml == path.parent / "out" / "j.xml"
    assert config.dump_dir == path.parent / "dumps" and config.inductor_cache == path.parent / "cache"
    scan = load_scan_config(path)
    assert scan.expect_clean is False and scan.graphs == {"0/1": True} and scan.pools == {"l0.v": False}
    assert scan.pools_file == path.parent / "pools.toml"
    assert scan.expects_clean("0/1", "x") is True and scan.expects_clean("0/2", "x") is False
    # unset keys keep their defaults; no table at all is None / the scan's defaults
    empty = load_config(_write(tmp_path, "[tool.compile_checks]\n"))
    assert empty is not None and empty.model_dump() == GateConfig().model_dump()
    assert (
        load_config(_write(tmp_path, "[tool.other]\n")) is None
        and load_scan_config(path.parent / "pyproject.toml") == ScanConfig()
    )


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('target = ["c.py:cases"]', "unknown key(s) in [tool.compile_checks]: target; valid: targets, pipelines"),
        ('targets = "c.py:cases"', "[tool.compile_checks] targets must be a list, got str"),
        ('targets = ["c.py:cases", 3]', "[tool.compile_checks] targets must be a list of strings, got int at 1"),
        ("targets = []", "[tool.compile_checks] targets is empty; name at least one, or remove the key"),
        ('pipelines = ["stock", "vlm"]', "[tool.compile_checks] pipelines unknown 'vlm'; valid: 'stock', 'vllm'"),
        ('full = "yes"', "[tool.compile_checks] full must be a bool (true / false), got str"),
        ("junitxml = 3", "[tool.compile_checks] junitxml must be a string (a path), got int"),
        ("scan = 1", "[tool.compile_checks] scan must be a table, got int"),
    ],
)
def test_a_bad_gate_table_names_the_file_and_the_key(tmp_path: Path, table: str, says: str) -> None:
    path = _write(tmp_path, f"[tool.compile_checks]\n{table}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: ") and says in str(e.value), str(e.value)


def test_every_problem_of_a_table_is_said_at_once(tmp_path: Path) -> None:
    path = _write(tmp_path, "[tool.compile_checks]\ntarget = []\nfull = 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).splitlines() == [
        f"{path}: unknown key(s) in [tool.compile_checks]: target; valid: targets, pipelines, full, junitxml, "
        "dump_dir, inductor_cache, fail_on_program_copies, scan",
        f"{path}: [tool.compile_checks] full must be a bool (true / false), got int",
    ]


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("expect_clen = true", "unknown key(s) in [tool.compile_checks.scan]: expect_clen; valid: expect_clean"),
        ('expect_clean = "no"', "[tool.compile_checks.scan] expect_clean must be a bool (true / false), got str"),
        (
            'graphs = {"0/1" = "no"}',
            "[tool.compile_checks.scan] graphs must map names to true / false, got str at '0/1'",
        ),
        ("pools = [1]", "[tool.compile_checks.scan] pools must be a table, got list"),
        ("pools_file = 1", "[tool.compile_checks.scan] pools_file must be a string (a path), got int"),
    ],
)
def test_a_bad_scan_table_is_a_usage_error_naming_the_key(tmp_path: Path, table: str, says: str) -> None:
    path = _write(tmp_path, f"[tool.compile_checks.scan]\n{table}\n")
    with pytest.raises(UsageError) as e:
        load_scan_config(path)
    assert str(e.value).startswith(f"{path}: ") and says in str(e.value), str(e.value)


def test_not_toml_and_not_a_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(_write(tmp_path, "[tool.compile_checks\n"))
    with pytest.raises(ConfigError, match=r"\[tool.compile_checks\] must be a table"):
        load_config(_write(tmp_path, "tool = {compile_checks = 3}\n"))
    with pytest.raises(UsageError, match="no such file"):
        load_scan_config(tmp_path / "missing.toml")
