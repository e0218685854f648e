"""Why Inductor's reinplace pass kept a copy: its rules, replayed on the graph it saw.

``torch/_inductor/fx_passes/reinplace.py`` (``reinplace_inplaceable_ops_core``) decides,
for every mutated argument of every ``auto_functionalized`` / ``auto_functionalized_v2``
node (and every functional ATen op it knows an in-place twin of), whether the write
may go straight into the buffer or must go into a clone. It records only the decision
(``meta["only_clone_these_tensors"]``). This module replays the same rules, in the same
order, on the same graph, and returns the rule that refused each cloned argument with
its evidence (the other argument, the reading node, the output). Pure: nothing is
compiled, so hand-built graphs can be explained.

Inductor's own helpers (storage of a node, view bases, the copy-back layout check)
are used as they are, so the replay sees what the pass saw.

Modules: :mod:`.records` (the :class:`Refusal` records), :mod:`.rules` (Inductor's per-argument
rules and the graph facts they read), :mod:`.replay` (the walk over a graph and the reconciliation
with what Inductor really cloned). The names below are the package's public face.
"""

from __future__ import annotations

from compile_checks.explain.refusals.records import Reader, Refusal, op_label
from compile_checks.explain.refusals.replay import cloned_args, explain_refusals, reconcile
from compile_checks.explain.refusals.rules import GraphFacts, refusal_of

__all__ = ["GraphFacts", "Reader", "Refusal", "cloned_args", "explain_refusals", "op_label", "reconcile", "refusal_of"]
