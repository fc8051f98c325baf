"""Custom all-reduce against NCCL on this GPU machine: `probe custom-allreduce` end to end.

Usage: python examples/custom_allreduce_gpu.py OUTDIR [--sizes 4K..1M:4] [--dtype bfloat16,float32]

With one GPU it runs two ranks on it (--share-gpu 2): correctness of every method across two
processes (our IPC one-shot/two-shot kernels, torch symmetric memory, NCCL), eager and in CUDA
graphs, at 4K, 16K, 64K, 256K and 1M; the times are time-slicing, not links. With several GPUs it runs one rank
per GPU and the times are link times. Writes OUTDIR/custom_allreduce_<gpu>_<ranks>.json (the
probe's JSON document; refuses to replace a file) and prints the table last. About a minute on
one H200 (two ranks sharing it) with the default counts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import torch

from ncclprobe.cli.output import emit
from ncclprobe.probes.custom_allreduce_plan import CustomAllReduceSpec
from ncclprobe.probes.custom_allreduce_report import table_rows, verdict
from ncclprobe.probes.custom_allreduce_run import run_custom_allreduce
from ncclprobe.sizes import parse_sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--sizes", default="4K..1M:4")
    parser.add_argument("--dtype", default="bfloat16,float32")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    gpus = torch.cuda.device_count()
    shared = gpus < 2
    # under --share-gpu every call waits for the other process's time slice: keep the counts small
    counts = dict(iters=10, trials=3, warmup=2, graph_ops=5, replays=2) if shared else {}
    spec = CustomAllReduceSpec(
        sizes=tuple(parse_sizes(args.sizes)),
        dtypes=tuple(args.dtype.split(",")),
        share_gpu=2 if shared else 0,
        **counts,
    )
    name = re.sub(r"[^a-z0-9]+", "_", torch.cuda.get_device_name(0).lower()).strip("_")
    target = (
        args.outdir / f"custom_allreduce_{name}_{'share_gpu2' if shared else f'{gpus}ranks'}.json"
    )
    if target.exists():
        raise SystemExit(f"{target} exists; not replacing it")
    args.outdir.mkdir(parents=True, exist_ok=True)

    def progress(step: dict, total: int) -> None:
        print(
            f"  {step['method']} {step['dtype']} {step['size_bytes']}B {step['mode']}",
            file=sys.stderr,
        )

    doc = run_custom_allreduce(spec, on_step=progress)
    partial = target.with_suffix(".json.tmp")
    partial.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    os.replace(partial, target)
    print(f"wrote {target}", file=sys.stderr)
    emit(
        "table",
        doc,
        table_rows(doc),
        title=f"custom-allreduce on {torch.cuda.get_device_name(0)}, "
        f"{doc['nranks']} ranks{' sharing GPU 0' if shared else ''}: us per all-reduce",
        notes=doc["notes"],
    )
    return verdict(doc).exit_code


if __name__ == "__main__":
    sys.exit(main())
