"""Plain ATen writes into a pool after a window gather: the check reports the copies and explains them
(docs: concepts, "What the check sees"; run by tests/test_docs_examples.py)."""

import torch

from compile_checks import analyze_pool_clones, format_report


def step(k, v, new_k, new_v, slots, window):
    kw, vw = k[window], v[window]  # gather the window ...
    k[slots] = new_k
    v[slots] = new_v  # ... then commit with plain ATen writes
    return kw.sum() + vw.sum()


k, v = torch.zeros(64, 2, 8), torch.zeros(64, 2, 8)
args = (torch.randn(4, 2, 8), torch.randn(4, 2, 8), torch.arange(60, 64), torch.arange(8))
pools = {"layer0.k": k, "layer0.v": v}
report = analyze_pool_clones(step, k, v, *args, pools=pools, analysis_only=True)
print(format_report(report))
