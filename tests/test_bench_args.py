"""A benchmark's usage errors stop it before it runs (argparse's exit 2), never a traceback after the run.

``--out`` is checked first: a directory where a file is written, a file where a folder is written, or a place
that cannot be written. Negative control: a good ``--out`` passes the check (and nothing else is run here).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

from reports.cli_args import out_dir, out_file

# (module, the argv that would run it for minutes: each must stop at its --out; the folder case first)
FILE_OUT = ["reports.bench_writes", "reports.diagram"]
DIR_OUT = ["reports.bench", "reports.bench_full", "reports.bench_hotpath", "reports.bench_production"]


@pytest.mark.parametrize("module", FILE_OUT)
def test_a_folder_given_for_a_file_is_a_usage_error_before_the_run(
    module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # bench_writes' quickest run still compiles; the check must come first, so it never starts
    argv = ["--out", str(tmp_path)] + (["--small", "--timeout", "1"] if module.endswith("bench_writes") else [])
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(module).main(argv)
    assert stopped.value.code == 2
    assert "is a directory; give the file to write" in capsys.readouterr().err


@pytest.mark.parametrize("module", DIR_OUT)
def test_a_file_given_for_a_folder_is_a_usage_error_before_the_run(
    module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "results.json"
    path.write_text("")
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(module).main(["--out", str(path)])
    assert stopped.value.code == 2
    assert "is a file; give the folder to write into" in capsys.readouterr().err


def test_a_writable_out_passes(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    assert out_dir(parser, tmp_path / "new") == tmp_path / "new" and (tmp_path / "new").is_dir()
    assert out_file(parser, tmp_path / "deep" / "x.json") == tmp_path / "deep" / "x.json"
    with pytest.raises(SystemExit):
        out_file(parser, tmp_path)  # the control's control: the same folder as a file is refused
