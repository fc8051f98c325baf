"""A short NCCL job whose only purpose is NCCL's own topology and graph dumps.

One rank per visible GPU (one rank on a one-GPU machine), each a real process with a real NCCL
communicator through torch.distributed; one all-reduce creates the communicator, and rank 0 writes
NCCL_TOPO_DUMP_FILE and NCCL_GRAPH_DUMP_FILE (the variable names come from the knowledge table).
NCCL_NVLS_ENABLE=0 always (no NVLink multicast objects on shared machines). Run by
`ncclprobe.diagnose.p2p.check` with a timeout: `python -m ncclprobe.probes.nccl_dump --out DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys

from ncclprobe.nccl.knobs import KNOBS
from ncclprobe.nccl.recipes import NO_NVLS, proof_env, rank_log_env

TOPO_VAR = KNOBS["NCCL_TOPO_DUMP_FILE"].name
GRAPH_VAR = KNOBS["NCCL_GRAPH_DUMP_FILE"].name


def worker(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    x = torch.ones(1024, device=f"cuda:{rank}")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ok = float(x[0]) == world
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "all_reduce_ok": ok}), flush=True)


def launch(out_dir: str, timeout_s: float) -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"status": "unavailable", "reason": "no CUDA GPU visible"}
    world = torch.cuda.device_count()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.makedirs(out_dir, exist_ok=True)
    env = {
        **os.environ,
        TOPO_VAR: os.path.join(out_dir, "nccl-topo.xml"),
        GRAPH_VAR: os.path.join(out_dir, "nccl-graph.xml"),
        **NO_NVLS,
        **proof_env(tuning=False, also=("GRAPH",)),
    }
    procs = []
    for rank in range(world):
        rank_env = {**env, **rank_log_env(out_dir, rank)}
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ncclprobe.probes.nccl_dump",
                    "--worker",
                    str(rank),
                    "--world",
                    str(world),
                    "--port",
                    str(port),
                ],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results, failed = [], []
    for rank, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            return {
                "status": "hang",
                "reason": f"rank {rank} gave no answer within {timeout_s:.0f} s",
            }
        if proc.returncode != 0:
            failed.append(
                f"rank {rank} exited {proc.returncode}: {(err or '').strip().splitlines()[-1:]}"
            )
        results += [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    written = {
        name: os.path.exists(os.path.join(out_dir, name))
        for name in ("nccl-topo.xml", "nccl-graph.xml")
    }
    return {
        "status": "error" if failed else "ok",
        "ranks": world,
        "written": written,
        "failed": failed,
        "all_reduce_ok": all(r.get("all_reduce_ok") for r in results) if results else None,
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("--worker", type=int)
    parser.add_argument("--world", type=int)
    parser.add_argument("--port", type=int)
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(args.worker, args.world, args.port)
        return 0
    print(json.dumps(launch(args.out, args.timeout)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
