"""Docs example (docs/guides/paging.md): two requests, batched commits, reads through the chunk window
on a real vLLM BlockPool."""

import torch

from ar_paging import allocate_kv_pool_with_views, chunk_slot_mapping, pool_write_chunk, read_window
from ar_paging.eviction_table import make_manager, make_spec, step_chunks

block_size, chunk_size, batch, H, D = 4, 8, 2, 2, 16
spec = make_spec(block_size, chunk_size, window_chunks=2, sink_chunks=1, reset_at_boundary=False)
# 2 requests x 8 blocks + null
manager, block_pool = make_manager(spec, num_chunks=6, num_gpu_blocks=17)
null_id = block_pool.null_block.block_id
kv_pools, k_pools, v_pools = allocate_kv_pool_with_views(
    block_pool.num_gpu_blocks,
    block_size,
    num_layers=1,
    num_kv_heads=H,
    head_dim=D,
    dtype=torch.float32,
    device="cpu",
)
steppers = [step_chunks(manager, 6, request_id=f"req-{b}") for b in range(batch)]
# remove_skipped_blocks + allocate, per request
for c, steps in enumerate(zip(*steppers)):
    start = c * chunk_size
    slots = torch.stack(
        [chunk_slot_mapping(s.block_ids, start, chunk_size, block_size) for s in steps],
    )
    new_k = torch.randn(batch, chunk_size, H, D)
    # slots: (batch, chunk_size)
    pool_write_chunk(k_pools[0], v_pools[0], new_k, new_k.clone(), slots)
    window = (steps[0].block_ids, start + chunk_size, block_size, null_id)
    k, v, pos = read_window(k_pools[0], v_pools[0], *window)
    # first position of each resident chunk
    print(c, pos.tolist()[::chunk_size])
