"""The worker entry of tests/test_nccl_facts_gpu.py: all-reduce once, then, when the payload asks,
change the environment and all-reduce on a new communicator (which reads it again)."""

import os

import torch
import torch.distributed as dist


def all_reduce_twice(ctx):
    x = torch.ones(1 << 20, device=ctx.device)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    second = ctx.payload.get("second_env") or {}
    if second:
        os.environ.update(second)
        dist.all_reduce(x, group=dist.new_group(list(range(ctx.world_size))))
        torch.cuda.synchronize()
    ctx.emit("completed")
