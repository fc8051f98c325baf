"""How long `ncclprobe diagnose --profile` takes, and how much memory it holds, against trace size.

Builds uncompressed Chrome traces of about 50, 100 and 200 MB (and the 200 MB one gzipped) by
repeating a real trace's steps (tests/fixtures/profiles/vllm_decode_full_cudagraph_bs32_mi300x_
tracelens.json.gz: kernels, launches, CPU ops, Python frames), each copy shifted in time and given
fresh correlation ids, written in Kineto's own indented layout. Then runs the real command in a
fresh process per size and reports its wall time and peak resident memory. Target (issue 15):
200 MB in under 20 s with under 2 GB on the 2-core CPU machine.

  python examples/bench_profile_reader.py [--sizes-mb 50,100,200] [--dir /tmp/profile-bench]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

SOURCE = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "fixtures"
    / "profiles"
    / "vllm_decode_full_cudagraph_bs32_mi300x_tracelens.json.gz"
)


def build(path: Path, megabytes: int) -> int:
    """Write a trace of about `megabytes` MB; returns the number of events."""
    doc = json.load(gzip.open(SOURCE))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    span = max(e["ts"] + e.get("dur", 0) for e in events) - start + 100.0
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    target, written, count, copy_index = megabytes * 1_000_000, 0, 0, 0
    with open(path, "w") as f:
        head = json.dumps(header, indent=2)[:-2]
        f.write(head + ',\n  "traceEvents": [\n')
        first = True
        while written < target:
            for event in events:
                e = copy.deepcopy(event)
                e["ts"] = e["ts"] + copy_index * span
                args = e.get("args") or {}
                for key, stride in (("correlation", 10_000_000), ("External id", 10_000_000)):
                    if isinstance(args.get(key), int):
                        args[key] += copy_index * stride
                text = ("" if first else ",\n") + json.dumps(e, indent=2)
                first = False
                f.write(text)
                written += len(text)
                count += 1
            copy_index += 1
        f.write("\n  ]\n}\n")
    return count


def measure(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, exit code) of `ncclprobe diagnose ARGS` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ncclprobe", "-q", "diagnose", *args, "--format", "json"],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode not in (0, 1):
        raise SystemExit(f"diagnose failed ({proc.returncode}): {proc.stderr.strip()}")
    return wall, max(peak, before) / 1024.0, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="50,100,200")
    parser.add_argument("--dir", default="/tmp/ncclprobe-profile-bench")
    opts = parser.parse_args()
    out = Path(opts.dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for mb in [int(x) for x in opts.sizes_mb.split(",")]:
            path = out / f"trace-{mb}mb.json"
            events = build(path, mb)
            size = path.stat().st_size / 1e6
            wall, peak, _ = measure(["--profile", str(path)])
            rows.append((f"{size:.0f} MB json", events, wall, peak))
            if mb == max(int(x) for x in opts.sizes_mb.split(",")):
                gz = path.with_suffix(".json.gz")
                with open(path, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst)
                wall, peak, _ = measure(["--profile", str(gz)])
                rows.append(
                    (f"{size:.0f} MB as {gz.stat().st_size / 1e6:.0f} MB gz", events, wall, peak)
                )
            path.unlink()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"{'trace':<24} {'events':>10} {'wall_s':>8} {'peak_rss_mb':>12}")
    for name, events, wall, peak in rows:
        print(f"{name:<24} {events:>10} {wall:>8.2f} {peak:>12.0f}")


if __name__ == "__main__":
    main()
