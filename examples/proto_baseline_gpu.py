"""Record the issue 36 case on one GPU and check that diagnose names NCCL's configuration: two ranks
with NCCL_PROTO=LL forced on 16 MiB all-reduces, against the same job on NCCL's defaults as the
baseline (reported: 576 ms per call against 8.5 ms, and no finding compared them).

Both jobs are `examples/record_rank_traces.py` (its tensor-parallel layer loop, one layer, batch
1024 x hidden 8192 bf16: each all-reduce 16 MiB), two processes sharing GPU 0 (each its own
NCCL_HOSTID, NCCL_NVLS_ENABLE=0), profiled with CUDA activity and shapes. Then
`ncclprobe diagnose --profile <LL ranks> --baseline-profile <default ranks> --format json` must
hold a `collective-vs-baseline` finding on the 16 MiB all-reduce that names NCCL (exit 1 if not).
Everything is written under --out (the profiles, truth files, the diagnosis as JSON and text).

  python examples/proto_baseline_gpu.py --out /tmp/proto-ll
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHAPE = ["--layers", "1", "--hidden", "8192", "--batch", "1024", "--steps", "8", "--warmup", "3"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="a new or empty directory")
    parser.add_argument("--proto", default="LL", help="the forced NCCL_PROTO of the slow run")
    opts = parser.parse_args(argv)
    if opts.out.exists() and (not opts.out.is_dir() or any(opts.out.iterdir())):
        parser.error(f"--out {opts.out} must be a new or empty directory")
    record = [sys.executable, str(HERE / "record_rank_traces.py"), "--device", "cuda"]
    runs = {"default": [], opts.proto.lower(): ["--nccl-env", f"NCCL_PROTO={opts.proto}"]}
    for name, extra in runs.items():
        out = opts.out / name
        cmd = record + ["--out", str(out), "--only", "healthy", "--prefix", name, *SHAPE, *extra]
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True)
    slow, base = opts.proto.lower(), "default"
    args = ["diagnose"]
    for rank in (0, 1):
        args += ["--profile", str(opts.out / slow / f"{slow}_healthy_rank{rank}.json.gz")]
    for rank in (0, 1):
        args += ["--baseline-profile", str(opts.out / base / f"{base}_healthy_rank{rank}.json.gz")]
    ncclprobe = [sys.executable, "-m", "ncclprobe"]
    text = subprocess.run(ncclprobe + ["--wide", *args], capture_output=True, text=True)
    (opts.out / "diagnosis.txt").write_text(text.stdout + text.stderr)
    done = subprocess.run(ncclprobe + [*args, "--format", "json"], capture_output=True, text=True)
    (opts.out / "diagnosis.json").write_text(done.stdout)
    print(text.stdout)
    doc = json.loads(done.stdout)
    found = [
        f
        for f in doc["findings"]
        if f["rule"] == "collective-vs-baseline"
        and f["evidence"]["library"] in ("NCCL", "RCCL")
        and f["evidence"]["size_bytes"] == 1024 * 8192 * 2
    ]
    print(
        json.dumps(
            {
                "collective_vs_baseline": [
                    {k: f["evidence"][k] for k in ("us_per_call", "baseline_us_per_call")}
                    for f in found
                ],
                "ok": bool(found),
            }
        )
    )
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
