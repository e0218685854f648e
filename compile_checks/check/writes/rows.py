"""Pool rows (dim 0): which rows' bytes changed, how many bytes a row holds, how to list rows in a message.

Apart because every write check (the watcher's diffs, the eager reference's compare, the findings'
messages) counts in the same rows.
"""

from __future__ import annotations

import torch


def rows_view(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a 2-d (rows, rest) view; a 0-d tensor is one row."""
    return t.reshape(1, -1) if t.dim() == 0 else t.reshape(t.shape[0], -1)


def changed_rows(before: torch.Tensor, after: torch.Tensor) -> list[int]:
    """Rows (dim 0) whose bytes differ; NaN equals NaN (a pool may start as garbage)."""
    if before.numel() == 0:
        return []
    ne = before != after
    if before.is_floating_point() or before.is_complex():
        ne &= ~(before.isnan() & after.isnan())
    return rows_view(ne).any(dim=1).nonzero().flatten().tolist()


def row_bytes(pool: torch.Tensor) -> int:
    rows = 1 if pool.dim() == 0 else max(pool.shape[0], 1)
    return pool.numel() * pool.element_size() // rows


def fmt_rows(rows: tuple[int, ...] | list[int], limit: int = 8) -> str:
    shown = ", ".join(map(str, list(rows)[:limit]))
    return f"[{shown}{', ...' if len(rows) > limit else ''}] ({len(rows)} row(s))"


__all__ = ["changed_rows", "fmt_rows", "row_bytes", "rows_view"]
