"""How long `ncclprobe diagnose --profile` takes, and how much memory it holds, against trace size.

Builds uncompressed Chrome traces of about 50, 100 and 200 MB (and the 200 MB one gzipped) by
repeating a real trace's steps (tests/fixtures/profiles/vllm_decode_full_cudagraph_bs32_mi300x_
tracelens.json.gz: kernels, launches, CPU ops, Python frames), each copy shifted in time and given
fresh correlation ids, written in Kineto's own indented layout. Then runs the real command in a
fresh process per size and reports its wall time and peak resident memory. Target (issue 15):
200 MB in under 20 s with under 2 GB on the 2-core CPU machine.

`--source hf` repeats instead a whole transformers generate() trace that names no step (tests/
fixtures/profiles/hf/hf_qwen2-6l_plain_noshapes.json.gz: 48 forwards, eager), so the steps come from
the kernel stream (evidence/run/profile/forwards.py): the finder's time and memory against size,
which must stay linear in the events (issue 26).

  python examples/bench_profile_reader.py [--sizes-mb 50,100,200] [--source vllm|hf] [--dir DIR]
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

PROFILES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "profiles"
SOURCES = {
    "vllm": PROFILES / "vllm_decode_full_cudagraph_bs32_mi300x_tracelens.json.gz",
    "hf": PROFILES / "hf" / "hf_qwen2-6l_plain_noshapes.json.gz",
}


def build(path: Path, megabytes: int, source: Path = SOURCES["vllm"]) -> int:
    """Write a trace of about `megabytes` MB; returns the number of events."""
    doc = json.load(gzip.open(source))
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


def measure(args: list[str]) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS in MB, exit code, CPU seconds) of `ncclprobe diagnose ARGS` in a
    fresh process (CPU time too: on a shared machine the wall time measures the neighbours)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ncclprobe", "-q", "diagnose", *args, "--format", "json"],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime - cpu_before
    if proc.returncode not in (0, 1):
        raise SystemExit(f"diagnose failed ({proc.returncode}): {proc.stderr.strip()}")
    return wall, max(peak, before) / 1024.0, proc.returncode, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="50,100,200")
    parser.add_argument("--dir", default="/tmp/ncclprobe-profile-bench")
    parser.add_argument("--source", choices=sorted(SOURCES), default="vllm")
    opts = parser.parse_args()
    out = Path(opts.dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for mb in [int(x) for x in opts.sizes_mb.split(",")]:
            path = out / f"trace-{mb}mb.json"
            events = build(path, mb, SOURCES[opts.source])
            size = path.stat().st_size / 1e6
            wall, peak, _, cpu = measure(["--profile", str(path)])
            rows.append((f"{size:.0f} MB json", events, wall, cpu, peak))
            if mb == max(int(x) for x in opts.sizes_mb.split(",")):
                gz = path.with_suffix(".json.gz")
                with open(path, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst)
                wall, peak, _, cpu = measure(["--profile", str(gz)])
                rows.append(
                    (
                        f"{size:.0f} MB as {gz.stat().st_size / 1e6:.0f} MB gz",
                        events,
                        wall,
                        cpu,
                        peak,
                    )
                )
            path.unlink()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"{'trace':<24} {'events':>10} {'wall_s':>8} {'cpu_s':>8} {'peak_rss_mb':>12}")
    for name, events, wall, cpu, peak in rows:
        print(f"{name:<24} {events:>10} {wall:>8.2f} {cpu:>8.2f} {peak:>12.0f}")


if __name__ == "__main__":
    main()
