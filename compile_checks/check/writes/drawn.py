"""Writes drawn from the RNG: random values judged by write, random positions by count.

Apart from :mod:`.lost` (the compare of one compiled call with its eager run) because these are the two
ways a random op makes eager's elements no reference for the compiled run's, whatever RNG state both
start from (the check restores it between the runs): Inductor draws its own numbers (``inductor_random``
seeded from the generator), eager ATen's, so the values differ unless ``fallback_random=True``.

* **random values** at fixed positions (dropout, ``bernoulli`` into the cache): a random value can land on
  the pre-image (dropout's zeros, ``bernoulli``'s 0 and 1 on a zeroed cache), so one element left as it was
  says nothing. A write is judged whole: the compiled run wrote it if it changed any of its elements; a
  dropped write changes none (:func:`written_groups`).
* **random positions** (slots from ``argsort(rand)``: an index tainted by a random op): the compiled run
  writes other positions by design. Compared by count along the written dim: the positions the compiled
  run wrote, among eager's and elsewhere (the pool's per-dim checksums), must be as many as eager's
  (:func:`moved_count`); fewer is a lost write.
"""

from __future__ import annotations

from typing import Any

import torch

from compile_checks.check.writes.finding import WriteFinding
from compile_checks.check.writes.positions import coordinates, per_dim, written_dim
from compile_checks.vocab import WriteProblem


def written_groups(changed: torch.Tensor, mask: torch.Tensor, group: torch.Tensor | None) -> torch.Tensor:
    """Per element: whether the compiled run changed any ``mask`` element of the write that last wrote it.

    Random values are judged by write, never by element: dropout's zeros and ``bernoulli``'s 0 and 1 land on
    a zeroed cache's pre-image by chance, a dropped write leaves every element of it as it was."""
    if group is None:  # one write
        return torch.full_like(mask, bool((changed & mask).any()))
    hit = torch.zeros(int(group.max()) + 1, dtype=torch.long, device=changed.device)
    hit = hit.scatter_reduce(0, group[mask], changed[mask].long(), "amax")
    return hit[group].bool()


def moved_count(
    name: str,
    pool: torch.Tensor,
    offsets: torch.Tensor,
    moved: torch.Tensor,
    written: torch.Tensor,
    eager_changed: torch.Tensor,
    elsewhere: list[list[int]],
    writers: list[str],
) -> WriteFinding | None:
    """Writes at positions drawn from the RNG (``argsort(rand)`` slots): Inductor draws its own numbers, so
    the compiled run writes other positions. Compared by count along the written dim: as many positions as
    eager's, among eager's and elsewhere (the scan); fewer is a lost write (a dropped write writes none)."""
    by = ", ".join(writers) or "an op the check did not see"
    shape = tuple(pool.shape)
    where = per_dim(coordinates(pool, offsets[moved & eager_changed])[0])
    if not where or not where[0]:
        return None
    dim = written_dim(shape, where)
    eager_rows = set(where[dim])
    compiled_rows = set(coordinates(pool, offsets[moved & written])[0][:, dim].tolist()) | set(elsewhere[dim])
    if len(compiled_rows) == len(eager_rows):
        return None
    fewer = len(compiled_rows) < len(eager_rows)
    details: dict[str, Any] = {
        "dim": dim,
        "positions": {},
        "random_positions": True,
        "eager_count": len(eager_rows),
        "compiled_count": len(compiled_rows),
        "eager_writers": list(writers),
        "shape": list(shape),
    }
    return WriteFinding(
        WriteProblem.LOST_WRITE,
        name,
        by,
        details=details,
        message=f"pool {name!r}: the compiled run wrote {len(compiled_rows)} position(s) along dim {dim} of "
        f"{list(shape)} where the eager run wrote {len(eager_rows)} at positions drawn from the RNG "
        f"({'a write the compiled run never made' if fewer else 'more than eager wrote'}; positions differ by "
        f"design: Inductor draws its own random numbers); eager wrote them with {by}",
    )


__all__ = ["moved_count", "written_groups"]
