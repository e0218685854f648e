"""Which storage a tensor lives in: its own identity, never only its address.

Pools are told apart by the storage they live in. A real tensor's storage is keyed by its data
pointer (two storages over the same memory, ``from_blob`` / DLPack, are one pool storage); a tensor
without memory, on ``meta`` or a ``FakeTensor`` (every one reports data pointer 0), by the identity
of its ``StorageImpl`` (``untyped_storage()._cdata``, what ``torch.multiprocessing``'s
``StorageWeakRef`` keys on): views share it, separate allocations never do.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake


def has_no_values(t: torch.Tensor) -> bool:
    """The tensor carries no data: on ``meta``, or a ``FakeTensor`` (of any device)."""
    return bool(t.is_meta or is_fake(t))


def storage_key(t: torch.Tensor) -> int:
    """An int naming ``t``'s storage: equal for views of one storage, different for separate ones.

    The data pointer for a tensor with memory; the ``StorageImpl``'s identity for one without (meta,
    fake) or of zero bytes. Both are addresses of live allocations, so the two kinds never collide.
    """
    storage = t.untyped_storage()
    if has_no_values(t):  # data_ptr() is 0 for all of them (and warns on a FakeTensor)
        return int(storage._cdata)
    return int(storage.data_ptr()) or int(storage._cdata)


__all__ = ["has_no_values", "storage_key"]
