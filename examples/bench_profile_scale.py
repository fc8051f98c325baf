"""`ncclprobe diagnose --profile DIR` on many ranks' traces, beside HolisticTraceAnalysis.

Traces: GENERATED from the real H200 recording tests/fixtures/profiles/ranks/ranks_host_late (7.3 MB
of Kineto JSON a rank, 32,721 events; tests/profile_job.py): N ranks, 8 to a host, each host's clock
running `--offset-us` ahead of the previous one, one late rank (the recording's). For each N, in
the same run and one after the other, runs ncclprobe and HTA's temporal breakdown
(`TraceAnalysis(trace_dir=DIR).get_temporal_breakdown()`) in fresh processes and prints wall time,
CPU time and the peak resident memory of the process tree (examples/bench_flight_recorder_scale.py
measures). Target (issue 37): 256 ranks in under 2 minutes and under 4 GB on the 2-core machine.

  python examples/bench_profile_scale.py [--ranks 64,256] [--offset-us 3000] [--dir /tmp/profscale]
      [--skip-hta] [--hta-timeout 900]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examples.bench_flight_recorder_scale import measure  # noqa: E402
from tests.profile_job import write_job  # noqa: E402

HTA = """
import logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
df = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
print(len(df), "ranks in HTA's temporal breakdown")
"""


def job(base: Path, ranks: int, offset_us: float) -> Path:
    path = base / f"r{ranks}_o{offset_us:g}"
    done = path / ".complete"
    if not done.exists():
        t = time.monotonic()
        write_job(path, ranks, late=ranks // 3, hosts=max(1, ranks // 8), offset_us=offset_us)
        for p in path.glob("*.json.gz"):  # Kineto writes plain JSON: read what users read
            import gzip

            p.with_suffix("").write_bytes(gzip.decompress(p.read_bytes()))
            p.unlink()
        done.write_text("")
        print(f"generated {ranks} traces in {time.monotonic() - t:.0f} s", flush=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="64,256")
    parser.add_argument("--offset-us", type=float, default=3000.0)
    parser.add_argument("--dir", default="/tmp/profscale")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--hta-timeout", type=int, default=900)
    args = parser.parse_args()
    for ranks in map(int, args.ranks.split(",")):
        path = job(Path(args.dir), ranks, args.offset_us)
        size = sum(p.stat().st_size for p in path.glob("*.json")) / 2**20
        # (ncclprobe's own output is kept beside the traces, as ncclprobe.out)
        load = os.getloadavg()[0]
        ours = measure([sys.executable, "-m", "ncclprobe", "diagnose", "--profile", str(path)])
        lines = ours["out"].splitlines()
        late = next((i + 1 for i, line in enumerate(lines) if "arrives late" in line), None)
        (path / "ncclprobe.out").write_text(ours["out"])
        words = " ".join(w for w in ours["out"].split() if w != "#")
        shifted = "taken off before the waits" in words
        print(
            f"{ranks:5d} ranks ({size:.0f} MB, load {load:.1f}): ncclprobe {ours['wall_s']:.1f} s "
            f"wall, {ours['cpu_s']:.1f} s CPU, {ours['peak_mb']:.0f} MB peak, exit {ours['code']}, "
            f"late rank at line {late} of {len(lines)}, host clocks lined up: {shifted}",
            flush=True,
        )
        if args.skip_hta:
            continue
        theirs = measure(["timeout", str(args.hta_timeout), sys.executable, "-c", HTA, str(path)])
        print(
            f"{'':5s}       HTA {theirs['wall_s']:.1f} s wall, {theirs['cpu_s']:.1f} s CPU, "
            f"{theirs['peak_mb']:.0f} MB peak, exit {theirs['code']} "
            f"({(theirs['out'].strip().splitlines() or theirs['err'])[-1][:80]})",
            flush=True,
        )


if __name__ == "__main__":
    main()
