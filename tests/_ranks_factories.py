"""Per-rank factories for tests/test_ranks_*.py; module level, as a rank must import them again."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from compile_checks import Case


def _tiny_case(rank: int) -> Case:
    pool = torch.zeros(16, 4)

    def step(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        k[:4] = x
        return x * 2

    return Case(f"tiny@rank{rank}", step, args=(pool, torch.ones(4, 4)), pools={"layer0.k": pool})


def rank1_raises(rank: int, world_size: int) -> Case:
    """Rank 1 raises while building its case; rank 0 waits for it in a barrier (a peer blocked in a collective)."""
    if rank == 1:
        raise RuntimeError("rank 1 cannot build its shard (deliberate)")
    dist.barrier()
    return _tiny_case(rank)


def rank1_raises_rank0_busy(rank: int, world_size: int) -> Case:
    """Rank 1 raises; rank 0 is busy in something that never notices (no collective to fail)."""
    if rank == 1:
        raise RuntimeError("rank 1 cannot build its shard (deliberate)")
    time.sleep(3600)
    return _tiny_case(rank)


def rank1_hangs(rank: int, world_size: int) -> Case:
    """Rank 1 never returns; rank 0 is done long before."""
    if rank == 1:
        print("rank 1 is about to hang", flush=True)
        time.sleep(3600)
    return _tiny_case(rank)


def sees_a_fresh_ranks_environment(rank: int, world_size: int) -> Case:
    """A clean case, built only where the rank sees what the launcher set for it (and the group is up)."""
    import os

    seen = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")}
    expected = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1"}
    if seen != expected or dist.get_world_size() != world_size:
        raise RuntimeError(f"rank {rank} sees {seen}, expected {expected}")
    return _tiny_case(rank)


def not_a_case(rank: int, world_size: int) -> object:
    return {"rank": rank}


def _reduce_pool_then_read(pool: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    before = pool.sum()
    dist.all_reduce(pool)  # an in-place collective on a pool; the old value is read too: kept out of place
    return x + before + pool[0].sum()


def _reduce_pool(pool: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(pool)  # re-inplaced by Inductor: all_reduce_(pool), a write and no copy
    return x + 1


def collective_on_pool(rank: int, world_size: int) -> Case:
    """Rank 0 all-reduces its pool and reads the old value (a pool copy survives); rank 1 only all-reduces it."""
    pool = torch.full((64, 16), float(rank + 1))
    fn = _reduce_pool_then_read if rank == 0 else _reduce_pool
    return Case(f"collective@rank{rank}", fn, args=(pool, torch.zeros(4)), pools={"layer0.k": pool}, check_writes=False)


def _vllm_tp_group(rank: int, world_size: int) -> str:
    """vLLM's own TP group over the launcher's gloo group (what ``torch.ops.vllm.all_reduce`` runs on)."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state

    with set_current_vllm_config(VllmConfig()):
        parallel_state.init_distributed_environment(world_size, rank, "env://", rank, backend="gloo")
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=world_size)
    return str(parallel_state.get_tp_group().unique_name)


def vllm_all_reduce(rank: int, world_size: int) -> Case:
    """A commit, then vLLM's out-of-place all-reduce custom op; rank 1 also reads the window it gathered
    before the commit (Inductor keeps the commit out of place there: a copy), rank 0 does not."""
    group = _vllm_tp_group(rank, world_size)
    # vLLM 0.33's CPU communicator all-reduces in place and returns its input, so the custom op's output
    # aliases its input; torch 2.14 warns about that, and raises when the environment has CI set
    # (torch._functorch.config.error_on_custom_op_aliasing defaults to bool($CI)): this test is about the
    # graph's copies, not vLLM's CPU kernel, so the aliasing is a warning here on every machine
    torch._functorch.config.error_on_custom_op_aliasing = False
    pool = torch.zeros(32, 4)

    def commit_then_reduce(k: torch.Tensor, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        k[slots] = x
        return torch.ops.vllm.all_reduce(x * 2, group) + k[slots].sum()

    def gather_commit_reduce(k: torch.Tensor, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        window = k[slots + 4]
        k[slots] = x
        return torch.ops.vllm.all_reduce(x * 2, group) + window.sum()

    fn = gather_commit_reduce if rank == 1 else commit_then_reduce
    return Case(
        f"vllm_ar@rank{rank}", fn, args=(pool, torch.ones(4, 4) * (rank + 1), torch.arange(4)), pools={"layer0.k": pool}
    )
