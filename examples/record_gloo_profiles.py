"""Record real PyTorch profiler traces of a plain gloo job, one Chrome trace per rank.

Why: ncclprobe's `diagnose --profile` must read jobs it did not write and that never load NCCL.
This script starts N CPU ranks with torch.multiprocessing (spawn), joins them in a gloo process
group over loopback, and runs a small MLP training step per iteration: forward, backward, one
all_reduce of the flattened gradients, SGD update. Every rank runs torch.profiler (CPU activity,
record_shapes) and writes its own `rank<r>.pt.trace.json.gz`. One rank can be made late: it
sleeps `--late-ms` before every step, inside the profiled step, so the truth is known by
construction (the late rank is the one that sleeps; no NCCL, no CUDA, no CUDA graphs).

    python examples/record_gloo_profiles.py --ranks 4 --late-rank 2 --late-ms 5 --output DIR

Beside the directory, `DIR.recording.json` holds the arguments, versions, and each rank's
measured step times (wall clock around each step, outside the profiler's own accounting); the
directory itself holds only the traces, as a profiler's output directory would.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Validate the options before torch is imported (a bad option costs no startup)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=4, help="number of gloo ranks (CPU processes)")
    p.add_argument("--steps", type=int, default=8, help="profiled steps per rank")
    p.add_argument(
        "--warmup", type=int, default=2, help="unprofiled steps before the profiled ones"
    )
    p.add_argument(
        "--late-rank", type=int, default=None, help="the rank that sleeps before every step"
    )
    p.add_argument("--late-ms", type=float, default=0.0, help="how long the late rank sleeps (ms)")
    p.add_argument(
        "--hidden", type=int, default=256, help="MLP width (gradients all-reduced per step)"
    )
    p.add_argument("--batch", type=int, default=32, help="rows per step")
    p.add_argument(
        "--output", type=Path, required=True, help="directory to create (must not exist)"
    )
    args = p.parse_args(argv)
    if args.ranks < 2:
        p.error("--ranks must be at least 2")
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    if args.late_rank is not None and not 0 <= args.late_rank < args.ranks:
        p.error(f"--late-rank must be in 0..{args.ranks - 1}")
    if args.late_ms < 0 or (args.late_ms > 0 and args.late_rank is None):
        p.error("--late-ms needs --late-rank and must be >= 0")
    if args.output.exists() or recording_path(args.output).exists():
        p.error(f"{args.output} (or its .recording.json) exists; choose a new directory")
    return args


def free_port() -> int:
    """A free TCP port on loopback for the rendezvous (traffic never leaves the machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recording_path(output: Path) -> Path:
    """The metadata goes beside the trace directory, so the directory holds only traces."""
    return output.with_name(output.name + ".recording.json")


def write_gz_atomically(src: Path, dest: Path) -> None:
    """Gzip src into dest through a temporary file, so no half-written trace is left behind."""
    tmp = dest.with_name(dest.name + ".tmp")
    with open(src, "rb") as fin, gzip.open(tmp, "wb", compresslevel=9) as fout:
        shutil.copyfileobj(fin, fout)
    os.replace(tmp, dest)


def rank_main(rank: int, args: argparse.Namespace, port: int, staging: str) -> None:
    """One rank: gloo group, warm-up steps, profiled steps, its own trace and step times."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.set_num_threads(1)
    torch.manual_seed(1234 + rank)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks
    )
    model = torch.nn.Sequential(
        torch.nn.Linear(args.hidden, args.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden),
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    late_s = args.late_ms / 1000.0 if rank == args.late_rank else 0.0

    def step() -> float:
        start = time.perf_counter()
        if late_s:
            time.sleep(late_s)
        x = torch.randn(args.batch, args.hidden)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(flat)
        flat /= args.ranks
        offset = 0
        for p in model.parameters():
            n = p.grad.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n
        opt.step()
        return (time.perf_counter() - start) * 1000.0

    for _ in range(args.warmup):
        step()
    dist.barrier()
    times = []
    raw = Path(staging) / f"rank{rank}.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=args.steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
    ) as prof:
        # one profiler warm-up step, then `steps` recorded ones, each a ProfilerStep#N
        for i in range(args.steps + 1):
            ms = step()
            if i:
                times.append(ms)
            prof.step()
    dist.barrier()
    write_gz_atomically(raw, Path(staging) / f"rank{rank}.pt.trace.json.gz")
    raw.unlink()
    (Path(staging) / f"rank{rank}.steps.json").write_text(json.dumps(times))
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.multiprocessing as mp

    args.output.parent.mkdir(parents=True, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".gloo-rec-", dir=args.output.parent)
    try:
        port = free_port()
        mp.spawn(rank_main, args=(args, port, staging), nprocs=args.ranks, join=True)
        steps = {}
        for r in range(args.ranks):
            steps[str(r)] = json.loads((Path(staging) / f"rank{r}.steps.json").read_text())
            (Path(staging) / f"rank{r}.steps.json").unlink()
        meta = {
            "what": "plain PyTorch job on torch.distributed gloo (CPU), torch.profiler on every rank",
            "recorded_by": "examples/record_gloo_profiles.py",
            "argv": sys.argv[1:] if argv is None else argv,
            "ranks": args.ranks,
            "steps": args.steps,
            "warmup_steps": args.warmup,
            "late_rank": args.late_rank,
            "late_ms": args.late_ms,
            "per_step": "sleep (late rank only), MLP forward+backward, one all_reduce of the "
            f"flattened gradients ({2 * args.hidden * args.hidden + 2 * args.hidden} float32), SGD",
            "backend": "gloo",
            "nccl_loaded": False,
            "cuda_graphs": False,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "measured_step_ms": steps,
        }
        meta_path = recording_path(args.output)
        tmp_meta = meta_path.with_name(meta_path.name + ".tmp")
        tmp_meta.write_text(json.dumps(meta, indent=2) + "\n")
        os.chmod(staging, 0o755)
        os.replace(staging, args.output)
        os.replace(tmp_meta, meta_path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
