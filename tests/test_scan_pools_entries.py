"""``scan --pools``: an entry that names no input of any graph is a usage error naming it, never silence.

A typo'd key used to leave the pool's copies unattributed: exit 0 on a clean trace with no note, and a
per-pool negative control read "negative control stopped cloning ... the check lost its power". Each
test has its twin with the correct key (the negative control: no error, the verdict as before).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_scan_units import DYNAMO, IDS, KEPT_FUNCTIONAL, REINPLACED, _art, _record, _trace

from compile_checks.cli import main
from compile_checks.errors import UsageError
from compile_checks.scan.artifacts import InputSource
from compile_checks.scan.inputs import PoolMap, check_pools_match, input_keys, unmatched_entries
from compile_checks.vocab import ExitCode

CLEAN = _record({"artifact": {"name": "inductor_post_grad_graph", "encoding": "string"}, **IDS}, REINPLACED)
COPYING = _record({"artifact": {"name": "inductor_post_grad_graph", "encoding": "string"}, **IDS}, KEPT_FUNCTIONAL)


def _scan(tmp_path: Path, post_grad: str, pools: str, config: str = "") -> list[str]:
    (tmp_path / "pools.toml").write_text(f"[pools]\n{pools}\n")
    (tmp_path / "pyproject.toml").write_text(f"[tool.compile_checks.scan]\n{config}\n")
    trace = _trace(tmp_path, DYNAMO, post_grad)
    return ["scan", str(trace), "--pools", str(tmp_path / "pools.toml"), "--config", str(tmp_path / "pyproject.toml")]


@pytest.mark.parametrize(("key", "code"), [("arg9_1", ExitCode.USAGE), ("arg0_1", ExitCode.CLEAN)])
def test_a_typo_on_a_clean_trace_is_a_usage_error_naming_it(tmp_path, capsys, key: str, code: ExitCode) -> None:
    assert main(_scan(tmp_path, CLEAN, f'{key} = "layer0.k"')) == code
    err = capsys.readouterr().err
    if code == ExitCode.USAGE:
        assert "this --pools entry matched nothing: 'arg9_1' = 'layer0.k'" in err and "arg0_1" in err
    else:
        assert "matched nothing" not in err  # the negative control: the right key is no error


@pytest.mark.parametrize(("key", "code"), [("arg9_1", ExitCode.USAGE), ("arg0_1", ExitCode.CLEAN)])
def test_a_per_pool_negative_control_with_a_typo_says_so(tmp_path, capsys, key: str, code: ExitCode) -> None:
    """The pool must keep being copied (``false``); its entry's typo is named, not "lost its power"."""
    args = _scan(tmp_path, COPYING, f'{key} = "layer0.k"', 'pools = {"layer0.k" = false}')
    assert main(args) == code
    out = capsys.readouterr()
    assert ("this --pools entry matched nothing" in out.err) == (code == ExitCode.USAGE)
    assert "lost its power" not in out.out + out.err


def test_a_judged_pool_no_entry_maps_is_a_usage_error(tmp_path, capsys) -> None:
    args = _scan(tmp_path, COPYING, 'arg0_1 = "layer0.k"', 'pools = {"layer0.kk" = false}')
    assert main(args) == ExitCode.USAGE
    assert "pool 'layer0.kk' of [tool.compile_checks.scan] pools" in capsys.readouterr().err


def test_every_kind_of_key_matches() -> None:
    inputs = {"arg0_1": InputSource(0, "L_k_", "L['k']", storage=1)}
    art = _art(KEPT_FUNCTIONAL, inputs=inputs)
    assert {"arg0_1", "arg2_1", "0", "2", "L_k_", "L['k']"} <= set(input_keys(art))
    keys = {"arg0_1": "a", "2": "b", "L_k_": "c", "L['k']": "d", "3": "typo", "L['kk']": "typo2"}
    assert unmatched_entries(PoolMap(keys), [art]) == ["3", "L['kk']"]
    check_pools_match(PoolMap({"L['k']": "layer0.k"}), [art], ["layer0.k"])  # matched, judged: no error
    with pytest.raises(UsageError, match="'3' = 'typo'"):
        check_pools_match(PoolMap(keys), [art], [])
