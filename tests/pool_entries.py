"""Worker entries used by the launcher tests: each one a real behaviour a pool must survive."""

import os
import time

import torch
import torch.distributed as dist


def sum_ranks(ctx):
    """All-reduce rank+1 over the pool: the exact answer is n(n+1)/2."""
    value = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(value)
    ctx.emit(
        "sum",
        value=value.item(),
        env_probe=os.environ.get("NCCLPROBE_TEST_VAR"),
        threads=torch.get_num_threads(),
    )


def hang_on_rank1(ctx):
    ctx.emit("before-hang")
    if ctx.rank == 1:
        time.sleep(3600)
    dist.barrier()


def crash_on_rank1(ctx):
    if ctx.rank == 1:
        raise RuntimeError("planted crash in rank 1")
    time.sleep(30)


def sigkill_rank1(ctx):
    """Rank 1 dies by SIGKILL (the OOM killer's way) after a barrier; rank 0 then fails in the
    next collective, noticing the dead peer: the launcher must blame rank 1, not rank 0."""
    import signal

    dist.barrier()
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def raw_nccl_ids(ctx):
    """Each rank's view of two raw-NCCL unique ids, exchanged through the launcher's store (the
    sweep opens one raw communicator per configuration: the second id must be a new one)."""
    from ncclprobe.probes import nccl_ctypes
    from ncclprobe.probes.sweep_comm import exchange_unique_id

    lib = nccl_ctypes.Library()
    ids = [exchange_unique_id(ctx, lib).hex() for _ in range(2)]
    ctx.emit("ids", ids=ids)


def ticks(ctx):
    """A barrier and a message every 50 ms for a minute: a pool that makes steady progress until
    one of its ranks stops (the test stops one with SIGSTOP)."""
    for tick in range(1200):
        dist.barrier()
        ctx.emit("tick", n=tick)
        time.sleep(0.05)
