"""A small gloo training job with the faults `ncclprobe capture` must name, one per rank.

Run under torchrun (`python -m torch.distributed.run --nproc-per-node 3 train_ranks.py ...`); each
rank trains a linear layer and all-reduces its gradients every step:
  --late-rank R     waits on the host for --late-s before every all-reduce (a data loader, a
                    metric; a sleep, not a spin: a Python-tracing profiler would record a spin's
                    every call)
  --late-spin       ... busy-waiting on the host instead (a loop of Python calls: what a profiler
                    recording stacks makes large, and slow to write)
  --filtered-rank R restarts itself through a launcher step that builds the worker's environment
                    from an allow-list without NCCL_* (the setting only its parent had)
  --hang-rank R     stays in host code at step --hang-at (never enters that step's all-reduce)
Prints one line per rank and step. Nothing here knows about ncclprobe.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--late-rank", type=int, default=-1)
    parser.add_argument("--late-s", type=float, default=0.3)
    parser.add_argument("--late-spin", action="store_true")
    parser.add_argument("--filtered-rank", type=int, default=-1)
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--hang-at", type=int, default=0)
    parser.add_argument("--filtered", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    if rank == args.filtered_rank and not args.filtered:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
        return subprocess.call([sys.executable, __file__, *sys.argv[1:], "--filtered"], env=env)
    return train(args, rank)


def train(args, rank: int) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    for step in range(1, args.steps + 1):
        if rank == args.hang_rank and step == args.hang_at:
            print(f"rank {rank} stays in host code at step {step}", flush=True)
            time.sleep(3600)
        loss = model(x).square().mean()
        loss.backward()
        if rank == args.late_rank and args.late_spin:
            end = time.perf_counter() + args.late_s
            while time.perf_counter() < end:
                pass
        elif rank == args.late_rank:
            time.sleep(args.late_s)
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
        model.zero_grad()
        print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
