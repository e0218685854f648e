"""The suite's kernel store (_kernel_store): a kernel built once is reused, only under its hashed name."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import torch
from _kernel_store import _stored_build, kernel_store
from torch._inductor import cpp_builder
from torch._inductor.cpp_builder import CppBuilder

HASHED = "c" + "a" * 51 + ".main.so"


class FakeBuilder:
    """A CppBuilder's two members the store reads: where the binary goes, and the build itself."""

    def __init__(self, target: Path, content: bytes) -> None:
        self.target, self.content, self.builds = target, content, 0

    def get_target_file_path(self) -> str:
        return str(self.target)


def fake_build(builder: FakeBuilder) -> None:
    builder.builds += 1
    builder.target.parent.mkdir(parents=True, exist_ok=True)
    builder.target.write_bytes(builder.content)


def test_a_hashed_binary_is_built_once_and_copied_to_the_next_compiles_folder(tmp_path: Path) -> None:
    build = _stored_build(tmp_path / "store", fake_build)
    (tmp_path / "store").mkdir()
    first, second = FakeBuilder(tmp_path / "a" / HASHED, b"elf"), FakeBuilder(tmp_path / "b" / HASHED, b"other")
    build(first)
    build(second)
    assert (first.builds, second.builds) == (1, 0)
    assert second.target.read_bytes() == b"elf"  # the stored binary, not a new build
    assert [p.name for p in (tmp_path / "store").iterdir()] == [HASHED]  # no partial copy left behind


def test_a_target_not_named_by_its_hash_is_built_every_time_and_never_stored(tmp_path: Path) -> None:
    """Negative control: the header preprocessor writes a fixed ``header.i`` whose content depends on
    its flags; reusing it by name would hand one compile another's output."""
    build = _stored_build(tmp_path / "store", fake_build)
    (tmp_path / "store").mkdir()
    first, second = FakeBuilder(tmp_path / "a" / "header.i", b"x"), FakeBuilder(tmp_path / "b" / "header.i", b"y")
    build(first)
    build(second)
    assert (first.builds, second.builds) == (1, 1)
    assert second.target.read_bytes() == b"y"
    assert list((tmp_path / "store").iterdir()) == []


def compile_and_count_gxx(fn, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``fn(x)`` compiled by Inductor from scratch (fresh caches), and how many g++ commands ran."""
    torch._dynamo.reset()
    with mock.patch.object(cpp_builder, "run_compile_cmd", wraps=cpp_builder.run_compile_cmd) as gxx:
        out = torch.compile(fn, backend="inductor")(x)
    return out, gxx.call_count


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 3.25 + 1.5


def shift(x: torch.Tensor) -> torch.Tensor:
    return x * 3.25 - 7.5


@pytest.mark.compile
@pytest.mark.parametrize("use_store", [True, False])
def test_inductor_rebuilds_a_kernel_only_without_the_store(tmp_path: Path, use_store: bool) -> None:
    """With the store a second from-scratch compile of the same function runs no g++, and its result is
    still right; a different kernel is built. Negative control: without the store (the g++ build as
    the product runs it) the second compile builds again, so the count above can see a rebuild."""
    x = torch.arange(8.0)
    g_build = getattr(CppBuilder.build, "__wrapped__", CppBuilder.build)  # the session's store set aside
    with mock.patch.object(CppBuilder, "build", g_build):
        store = kernel_store(tmp_path / "store") if use_store else mock.patch.object(CppBuilder, "build", g_build)
        with store:
            out1, first = compile_and_count_gxx(scale, x)
            out2, second = compile_and_count_gxx(scale, x)
            out3, other = compile_and_count_gxx(shift, x)
    assert torch.equal(out1, scale(x)) and torch.equal(out2, scale(x)) and torch.equal(out3, shift(x))
    assert first > 0 and other > 0
    assert second == (0 if use_store else first)
