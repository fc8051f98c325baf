"""One GPU: per-call time of an eager all-reduce against the same calls captured in a CUDA graph,
4 KiB to 256 MiB, through the sweep itself (one-rank NCCL, NCCL log capture on).

Run on a GPU machine: python examples/bench_allreduce_gpu.py [--iters 50 --trials 5]
Prints one row per size (median over trials of the per-call time, in-place) and the saving.
With one rank NCCL moves no data, so what is measured is the per-call launch path that a graph
replay does not pay (compare h200-measurements.md: about 18 us per eager call).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from ncclprobe.sizes import format_size, parse_sizes
from ncclprobe.sweep import session
from ncclprobe.sweep.plan import SweepSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4K..256M")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    spec = SweepSpec(
        grid={},
        sizes=tuple(parse_sizes(args.sizes)),
        modes=("eager", "graph"),
        in_place=(True,),
        iters=args.iters,
        trials=args.trials,
        warmup=5,
        nranks=1,
        backend="nccl",
    )
    with tempfile.TemporaryDirectory() as tmp:
        results = session.run_job(
            session.new_job(spec, {}, str(Path(tmp) / "bench.jsonl"), ["bench"])
        )
    by = {(r.mode, r.size_bytes): r for r in results.results}
    print(
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, NCCL "
        f"{'.'.join(map(str, torch.cuda.nccl.version()))}, one rank, in-place float32, "
        f"{args.iters} calls x {args.trials} trials"
    )
    print(f"{'size':>6} {'eager_us':>9} {'graph_us':>9} {'saved_us':>9} {'wrong':>6}")
    for size in spec.sizes:
        eager, graph = by[("eager", size)], by[("graph", size)]
        print(
            f"{format_size(size):>6} {eager.time_us:9.2f} {graph.time_us:9.2f} "
            f"{eager.time_us - graph.time_us:9.2f} {eager.wrong + graph.wrong:6d}"
        )


if __name__ == "__main__":
    main()
