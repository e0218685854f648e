"""PyTorch's own count of the reinplacing it missed (``ReinplaceCounters``), held against the check's copies.

Inductor's reinplace pass (``torch/_inductor/fx_passes/reinplace.py``, ``log_inplace_results``) adds,
for every mutated argument of an ``auto_functionalized`` / ``auto_functionalized_v2`` call it tried and
failed to write in place, that argument's bytes to ``torch._dynamo.utils.ReinplaceCounters``
(``missed_bytes_AUTO_FUNC_V1`` / ``_V2``): the figure dynamo logs as its ``reinplace_counters`` signpost.
The probe reads the counter just before and after each graph's reinplace pass (:func:`missed_bytes`),
and :func:`disagreement_note` holds that graph's figure against the bytes of the functionalization
clones the check found in it.

The two count different things, so a disagreement is a note for the reader, never a verdict (the
verdict is the final graph and Inductor's generated code):

* an argument sharing a storage another argument of the same call was just written in place into is
  cloned without being tried, so PyTorch does not count it (K and V as two views of one allocation);
* PyTorch counts a clone of an intermediate the program made, which copies no caller's tensor;
* PyTorch counts the argument (v2: the whole base), the check the span the clone copies;
* a symbolic size counts 0 in PyTorch's figure: graphs with one are not compared.
"""

from __future__ import annotations

from collections.abc import Sequence

from compile_checks.check.graph.sites import CloneSite
from compile_checks.vocab import CopyKind


def missed_bytes() -> int | None:
    """PyTorch's running total of missed reinplacing bytes (``None``: this torch has no such counter)."""
    try:
        from torch._dynamo.utils import ReinplaceCounters
    except ImportError:
        return None
    total = getattr(ReinplaceCounters, "get_total_missed_bytes", None)
    return int(total()) if callable(total) else None


def missed_since(before: int | None) -> int | None:
    """Bytes PyTorch counted as missed since ``before`` (a :func:`missed_bytes` reading)."""
    now = missed_bytes()
    return None if now is None or before is None else max(0, now - before)


def check_bytes(sites: Sequence[CloneSite]) -> int | None:
    """Bytes of the functionalization clones in one graph, at its compile-time sizes (None: a size is symbolic)."""
    clones = [s for s in sites if s.kind == CopyKind.FUNCTIONALIZATION_CLONE]
    if any(s.clone.is_symbolic for s in clones):
        return None
    return sum(s.clone.nbytes for s in clones)


def disagreement_note(region: int, pytorch_missed: int | None, sites: Sequence[CloneSite]) -> str | None:
    """A note when PyTorch's ``ReinplaceCounters`` and the check count one graph's missed reinplacing apart."""
    ours = check_bytes(sites)
    if pytorch_missed is None or ours is None or ours == pytorch_missed:
        return None
    return (
        f"region {region}: PyTorch's ReinplaceCounters records {pytorch_missed} missed bytes in this graph's "
        f"reinplace pass, the check {ours} bytes of clones of caller tensors (PyTorch leaves out an argument "
        "cloned because another was written in place into its storage, counts clones of intermediates and "
        "whole arguments or bases); the check's figure is what the final graph copies"
    )


__all__ = ["check_bytes", "disagreement_note", "missed_bytes", "missed_since"]
