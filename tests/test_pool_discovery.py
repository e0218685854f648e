"""Pool discovery walks tensors and containers, never the interpreter's modules, and never crashes.

SGLang's ``MHATokenToKVPool`` keeps ``self.device_module = torch.get_device_module(device)`` (the
``torch.cpu`` module) beside its ``k_buffer`` / ``v_buffer`` lists: a walk that follows it reaches
``sys.modules`` and objects such as ``unittest.mock.call``, which answers every attribute (``_fields``
included) and is no NamedTuple.
"""

from __future__ import annotations

import functools
import unittest.mock
from typing import NamedTuple

import pytest
import torch

from compile_checks.pools import PoolNamingError, pools_from_module, pools_from_tensors


class _TokenToKVPool:
    """The attributes of SGLang 0.5's ``MHATokenToKVPool`` that matter to discovery (tiny sizes)."""

    def __init__(self, layers: int = 2) -> None:
        self.size, self.head_num, self.head_dim, self.layer_num = 16, 2, 8, layers
        self.device = "cpu"
        self.device_module = torch.get_device_module("cpu")  # the torch.cpu module, as SGLang keeps it
        self.dtype = torch.float32
        self.k_buffer = [torch.zeros(17, 2, 8) for _ in range(layers)]
        self.v_buffer = [torch.zeros(17, 2, 8) for _ in range(layers)]
        self.mock_call = unittest.mock.call  # a tuple subclass that answers every attribute
        self.hook = functools.partial(print, "unused")
        self.kind = _TokenToKVPool
        self.alt_stream = None


def test_discovery_does_not_follow_a_module_reference() -> None:
    pool = _TokenToKVPool()
    pools = pools_from_module(pool, "k_buffer.*", "v_buffer.*")
    assert list(pools) == ["k_buffer.0", "k_buffer.1", "v_buffer.0", "v_buffer.1"]
    assert pools["v_buffer.1"] is pool.v_buffer[1]


def test_a_pattern_into_the_module_reference_matches_nothing_and_says_what_was_found() -> None:
    # negative control: the module's own tensors (if any) are never pools of the cache object
    with pytest.raises(PoolNamingError, match=r"matches no tensor under _TokenToKVPool .*k_buffer\.0"):
        pools_from_module(_TokenToKVPool(), "device_module.*")


def test_mock_call_is_no_namedtuple() -> None:
    class KV(NamedTuple):
        k: torch.Tensor
        v: torch.Tensor

    kv = KV(torch.zeros(4), torch.zeros(4))
    assert list(pools_from_tensors(kv, "layer0")) == ["layer0.k", "layer0.v"]
    with pytest.raises(PoolNamingError, match="expected a mapping or NamedTuple"):
        pools_from_tensors(unittest.mock.call, "x")
    holder = {"kv": kv, "call": unittest.mock.call}
    assert list(pools_from_module(holder, "kv.*")) == ["kv.k", "kv.v"]


def test_a_container_whose_items_raise_is_passed_over_and_said() -> None:
    class Broken(dict):  # type: ignore[type-arg]
        def items(self):  # type: ignore[no-untyped-def, override]
            raise RuntimeError("no")

    holder = {"bad": Broken(a=1), "k": torch.zeros(2)}
    assert list(pools_from_module(holder, "k")) == ["k"]
    with pytest.raises(PoolNamingError, match=r"passed over, their contents could not be listed: bad \(Broken"):
        pools_from_module(holder, "bad.*")
