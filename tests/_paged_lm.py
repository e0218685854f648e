"""A newcomer's 2-layer paged LM, as a gate target: one ``(layers, 2, slots, H, D)`` buffer, K and V of layer i
taken as ``buf[i, 0]`` / ``buf[i, 1]`` and written through ``.view(-1, H, D).index_copy_``.

Each write goes through a view of the one buffer, so functionalization scatters it back into the whole
buffer, one scatter per write: a whole-buffer copy per write survives (a negative control). The scan's
agreement tests compile it under the live check with the trace on, and compare the two commands' causes.
"""

from __future__ import annotations

import torch
from torch import nn

from compile_checks import Case

LAYERS, SLOTS, HEADS, HEAD_DIM, WIDTH = 2, 16, 2, 8, 16


class PagedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.zeros(LAYERS, 2, SLOTS, HEADS, HEAD_DIM))
        self.qkv = nn.ModuleList(nn.Linear(WIDTH, 3 * HEADS * HEAD_DIM) for _ in range(LAYERS))
        self.out = nn.ModuleList(nn.Linear(HEADS * HEAD_DIM, WIDTH) for _ in range(LAYERS))

    def forward(self, x: torch.Tensor, slots: torch.Tensor, win: torch.Tensor) -> torch.Tensor:
        for i in range(LAYERS):
            q, k, v = self.qkv[i](x).view(-1, 3, HEADS, HEAD_DIM).unbind(1)
            keys, values = self.buf[i, 0], self.buf[i, 1]
            keys.view(-1, HEADS, HEAD_DIM).index_copy_(0, slots, k)
            values.view(-1, HEADS, HEAD_DIM).index_copy_(0, slots, v)
            att = torch.einsum("thd,shd->hts", q, keys[win]).softmax(-1)
            x = x + self.out[i](torch.einsum("hts,shd->thd", att, values[win]).reshape(-1, HEADS * HEAD_DIM))
        return x


def paged_lm() -> Case:
    torch.manual_seed(0)
    model = PagedLM().requires_grad_(False)
    x = torch.randn(4, WIDTH)
    slots, win = torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 2, 3])
    return Case("paged_lm", model, args=(x, slots, win), pools={"buf": model.buf}, expect_clean=False)
