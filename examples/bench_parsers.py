"""Parser speed on logs as large as real ones, and on lines built to make a pattern backtrack.

Run: python examples/bench_parsers.py OUTDIR [--mb 100]   (CPU only; writes OUTDIR/big.log and
OUTDIR/bench_parsers.json, prints a table last; asserts nothing: the targets are figures to read)

1. A real-looking NCCL debug log of --mb megabytes (default 100): the real logs of tests/fixtures
   (11 NCCL versions, mpirun tags, timestamps, application output between NCCL lines) repeated
   with fresh host names and pids, as the logs of many jobs concatenated. `nccl-log` reads it
   through the same calls as the command: read, decode, parse. Target: under 10 s on the 2-core
   CI machine.
2. One 1 MB line without spaces, and other shapes that made the NCCL prefix pattern quadratic
   (tens of minutes for 800,000 characters before the fix), through every text parser: the NCCL
   log reader, the nccl-tests reader, the topology reader and secret masking. Target: each under
   1 s.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import time
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log, parse_nccl_log_file
from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests
from ncclprobe.evidence.node.topo import parse_topo
from ncclprobe.secrets import mask_argv, mask_text

_PREFIX = re.compile(r"^([^\s:\[\]]+):([0-9]+):", re.M)
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "nccl_logs"
LONG_LINES = {
    "1 MB, no spaces": "a" * (1 << 20),
    "1 MB of 'host:1:'": "host:1:" * ((1 << 20) // 7),
    "1 MB of '[' ": "[" * (1 << 20),
    "1 MB after a prefix": "h:1:1 [0] NCCL INFO " + "x" * (1 << 20),
    "1 MB of 'eyJ'": "eyJ" * ((1 << 20) // 3),
    "1 MB of '://a:'": "://a:" * ((1 << 20) // 5),
}


def real_looking_log(path: Path, megabytes: int) -> int:
    """Fixture logs repeated to `megabytes`, each copy with its own host and pids; returns the size."""
    texts = [
        p.read_text(encoding="utf-8", errors="replace") for p in sorted(FIXTURES.glob("*.log"))
    ]
    target, written, copy = megabytes << 20, 0, 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            for (
                text
            ) in texts:  # each copy another job: its own hosts and pids, as in a fleet's logs
                chunk = (
                    _PREFIX.sub(lambda m: f"{m[1]}-{copy}:{int(m[2]) + copy}:", text)
                    if copy
                    else text
                )
                out.write(chunk + "\n")
                written += len(chunk) + 1
            copy += 1
    return path.stat().st_size


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def cpu_timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a shared machine the second is the fair one."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def quietly(parse):
    def run(text):
        try:
            parse(text)
        except UsageProblem:
            pass

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--mb", type=int, default=100)
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    log = args.outdir / "big.log"
    size = real_looking_log(log, args.mb)
    rows = []
    seconds, cpu = cpu_timed(lambda: parse_nccl_log_file(log))
    rows.append(
        {
            "input": f"real-looking NCCL log, {size / 2**20:.0f} MiB",
            "parser": "nccl-log (read+parse)",
            "seconds": round(seconds, 2),
            "cpu_s": round(cpu, 2),
            "MB_per_s": round(size / 2**20 / seconds, 1),
        }
    )
    parsers = {
        "nccl-log": parse_nccl_log,
        "nccl-tests": quietly(parse_nccl_tests),
        "topo": quietly(parse_topo),
        "mask_text": mask_text,
        "mask_argv": lambda t: mask_argv([t]),
    }
    for name, text in LONG_LINES.items():
        for parser_name, parse in parsers.items():
            rows.append(
                {
                    "input": name,
                    "parser": parser_name,
                    "seconds": round(timed(lambda: parse(text)), 3),
                    "MB_per_s": None,
                }
            )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    (args.outdir / "bench_parsers.json").write_text(
        json.dumps({"rows": rows, "peak_rss_mib": round(peak_mib)}, indent=1)
    )
    log.unlink()
    width = max(len(r["input"]) for r in rows)
    print(f"{'input':<{width}}  {'parser':<22}  {'seconds':>8}  {'cpu_s':>6}  {'MB/s':>6}")
    for r in rows:
        rate = f"{r['MB_per_s']:6.1f}" if r["MB_per_s"] else "     -"
        cpu = f"{r['cpu_s']:6.2f}" if r.get("cpu_s") is not None else "     -"
        print(f"{r['input']:<{width}}  {r['parser']:<22}  {r['seconds']:8.3f}  {cpu}  {rate}")
    print(f"peak RSS {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
