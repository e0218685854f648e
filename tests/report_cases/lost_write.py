"""One model, three layouts, for the report's lost-write test: split (clean), fused (negative control: copies)
and ``lost``, the split layout whose cache-write op declares ``mutates_args=()`` and returns an unused dummy,
so AOT autograd drops it (a ``lost_write`` the gate reports). Its graph moves no write bytes: taken as the
model's ideal, it would shrink every layout's ideal. ``meta["model"]`` puts the three in one model.
"""

import torch

from ar_paging import gather_window, pool_write_chunk
from compile_checks.case import Case

N, H, D, T, W = 64, 2, 8, 4, 8


@torch.library.custom_op("report_lost_write::commit", mutates_args=())
def commit_undeclared(
    k_pool: torch.Tensor, v_pool: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    k_pool[slots] = k
    v_pool[slots] = v
    return k.new_empty(0)


@commit_undeclared.register_fake
def _(k_pool, v_pool, k, v, slots):  # type: ignore[no-untyped-def]
    return k.new_empty(0)


def _attend(k_pool, v_pool, x, window_slots):  # type: ignore[no-untyped-def]
    k, v = gather_window(k_pool, v_pool, window_slots)
    s = torch.einsum("thd,shd->hts", x, k).softmax(-1)
    return torch.einsum("hts,shd->thd", s, v)


def step(k_pool, v_pool, x, window_slots, slot_mapping):  # type: ignore[no-untyped-def]
    out = _attend(k_pool, v_pool, x, window_slots)
    pool_write_chunk(k_pool, v_pool, (x + out).unsqueeze(0), (x - out).unsqueeze(0), slot_mapping)
    return out


def step_undeclared(k_pool, v_pool, x, window_slots, slot_mapping):  # type: ignore[no-untyped-def]
    out = _attend(k_pool, v_pool, x, window_slots)
    commit_undeclared(k_pool, v_pool, x + out, x - out, slot_mapping.flatten())  # the dummy is unused: dropped
    return out


def _case(name: str, fused: bool = False, lost: bool = False) -> Case:
    if fused:
        kv = torch.zeros(2, N, H, D)
        k, v = kv[0], kv[1]
    else:
        k, v = torch.zeros(N, H, D), torch.zeros(N, H, D)
    x = torch.randn(T, H, D, generator=torch.Generator().manual_seed(0))
    ws, sm = torch.arange(W), torch.arange(W, W + T).unsqueeze(0)
    fn = step_undeclared if lost else step

    def drive(compiled):  # type: ignore[no-untyped-def]
        return [compiled(k, v, x, ws, sm) for _ in range(2)]

    return Case(
        name=name, fn=fn, driver=drive, pools={"k": k, "v": v}, expect_clean=not fused, meta={"model": "attend"}
    )


def cases() -> list[Case]:
    return [_case("lw_split"), _case("lw_fused", fused=True), _case("lw_lost", lost=True)]
