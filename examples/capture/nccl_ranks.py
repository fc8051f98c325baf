"""Two NCCL ranks sharing one GPU, run under torchrun, with the seed case's faults: each step a
decode replayed from a CUDA graph and a 4-token verify launched eagerly (the verify the graphs do not
cover), every layer followed by an all-reduce as tensor parallelism does; and --hang-rank R staying
in host code at step --hang-at, while the other rank waits in its all-reduce.

Ranks on one GPU look like two hosts to NCCL only with a NCCL_HOSTID each: each rank sets its own
before NCCL starts (NVLS stays off: NCCL_NVLS_ENABLE=0 from the environment). Steps are annotated as
an engine annotates them (`ncclprobe::decode[b=1 t=1]`, `ncclprobe::verify[b=1 t=4]`).

  NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 nccl_ranks.py [--steps 12] [--hang-rank 1 --hang-at 9]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--hang-at", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    os.environ["NCCL_HOSTID"] = f"capture-share-gpu-rank{rank}"
    import torch
    import torch.distributed as dist

    from ncclprobe.cudagraph import capture_graph

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(
                torch.nn.Linear(args.hidden, args.hidden) for _ in range(args.layers)
            )

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
                dist.all_reduce(x)
            return x

    model = Model().cuda().eval()
    decode_in = torch.randn(1, 1, args.hidden, device="cuda")
    verify_in = torch.randn(1, 4, args.hidden, device="cuda")
    with torch.no_grad():
        # the one capture idiom (ncclprobe.cudagraph): warm-up on a side stream, then the capture
        graph, _ = capture_graph(
            lambda: model(decode_in),
            warmup=lambda: (model(decode_in), model(verify_in)),
            warmups=2,
        )
        for step in range(1, args.steps + 1):
            if rank == args.hang_rank and step == args.hang_at:
                print(f"rank {rank} stays in host code at step {step}", flush=True)
                time.sleep(3600)
            with torch.profiler.record_function("ncclprobe::decode[b=1 t=1]"):
                graph.replay()
            with torch.profiler.record_function("ncclprobe::verify[b=1 t=4]"):
                model(verify_in)
            torch.cuda.synchronize()
            print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
