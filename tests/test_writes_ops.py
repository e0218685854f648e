"""What an op declares it writes, read off its schema (once per overload: the watcher asks per call)."""

from __future__ import annotations

import torch

import ar_paging  # noqa: F401 - registers torch.ops.ar_paging.paged_write
from compile_checks.check.writes.ops import declared_mutations, declares_write, is_opaque, op_name

aten = torch.ops.aten


def test_the_written_argument_by_position_by_keyword_and_in_a_list() -> None:
    a, b, out = torch.zeros(2), torch.ones(2), torch.empty(2)
    assert [t is a for t in declared_mutations(aten.add_.Tensor, (a, b), {})] == [True]
    (written,) = declared_mutations(aten.add.out, (a, b), {"out": out})
    assert written is out
    assert [t is x for t, x in zip(declared_mutations(aten._foreach_add_.Scalar, ([a, b], 1.0), {}), (a, b))] == [
        True,
        True,
    ]


def test_a_functional_op_declares_nothing_and_asked_twice_answers_the_same() -> None:
    a, b = torch.zeros(2), torch.ones(2)
    for _ in range(2):  # the second answer comes from the per-overload cache
        assert declared_mutations(aten.add.Tensor, (a, b), {}) == []
        assert not declares_write(aten.add.Tensor)
        assert declares_write(aten.add_.Tensor)
    assert not declares_write(len)  # no schema: a plain callable in a graph declares nothing


def test_opaque_means_outside_the_trusted_namespaces() -> None:
    paged_write = torch.ops.ar_paging.paged_write.default
    assert is_opaque(paged_write) and declares_write(paged_write)
    assert not is_opaque(aten.index_put_.default) and not is_opaque(len)
    assert op_name(paged_write) == "ar_paging::paged_write" and op_name(aten.add.out) == "aten::add.out"
