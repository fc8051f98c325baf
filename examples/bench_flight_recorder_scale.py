"""ncclprobe beside PyTorch's own analyzer on many ranks' Flight Recorder dumps, and the pickle bombs.

Dumps: GENERATED from the real recording tests/fixtures/flight_recorder/nccl/skip (its entries,
frames, pg_config and pg_status; tests/flight_recorder_job.py): N ranks, C all_reduces each, one rank
that never entered the next one. For each size, in the same run and one after the other, runs
`ncclprobe diagnose --flight-recorder DIR` and `python -m torch.distributed.flight_recorder.fr_trace
DIR -p nccl_trace_rank_`, each in a fresh process, and prints wall time, CPU time (the process and
its workers) and the peak resident memory of the whole process tree (sampled every 20 ms), then the
ratio. The machine may be shared: `uptime`'s load is printed with each size; repeat for the spread.

Bombs (`--bombs`): pickles that are small on disk and costly to load (a memo index that makes the C
unpickler zero 1 GB, a million empty sets, a tuple hashed 2**40 times, a list shared 10**10 times,
gzip of each): each must be refused (exit 2) within seconds and under 500 MB (issue 40 §3).

  python examples/bench_flight_recorder_scale.py [--ranks 64,256,1024] [--calls 1000,2000] \\
      [--dir /tmp/frscale] [--bombs] [--skip-fr-trace]
"""

from __future__ import annotations

import argparse
import gzip
import os
import pickle
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.flight_recorder_dumps import dump  # noqa: E402
from tests.flight_recorder_job import write_job  # noqa: E402


def measure(argv: list[str]) -> dict:
    """Wall, CPU (with children) and peak tree RSS of one command; its exit code and last line."""
    import resource
    import tempfile

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        proc = psutil.Popen(argv, stdout=out_f, stderr=err_f, cwd=ROOT)
        peak = 0
        while proc.poll() is None:
            rss = 0
            try:
                for p in [proc, *proc.children(recursive=True)]:
                    try:
                        rss += p.memory_info().rss
                    except psutil.NoSuchProcess:
                        pass
            except psutil.NoSuchProcess:
                break
            peak = max(peak, rss)
            time.sleep(0.02)
        wall = time.monotonic() - start
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command and every child it reaped
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "all_err": err.decode(errors="replace"),
        "peak_mb": peak / 2**20,
        "code": proc.returncode,
        "out": out.decode(errors="replace"),
        "err": err.decode(errors="replace").strip().splitlines()[-1:] or [""],
    }


def job(base: Path, ranks: int, calls: int) -> Path:
    path = base / f"r{ranks}_c{calls}"
    done = path / ".complete"
    if not done.exists():
        t = time.monotonic()
        write_job(path, ranks, calls, culprit=ranks // 3, jobs=os.cpu_count() or 1)
        done.write_text("")
        print(
            f"generated {ranks} ranks x {calls} calls in {time.monotonic() - t:.0f} s", flush=True
        )
    return path


def compare(base: Path, ranks: int, calls: int, skip_fr: bool) -> None:
    path = job(base, ranks, calls)
    size = sum(p.stat().st_size for p in path.iterdir()) / 2**20
    load = os.getloadavg()[0]
    ours = measure([sys.executable, "-m", "ncclprobe", "diagnose", "--flight-recorder", str(path)])
    lines = ours["out"].splitlines()
    culprit = next((i + 1 for i, line in enumerate(lines) if "never entered" in line), None)
    print(
        f"{ranks:5d} ranks x {calls} calls ({size:.0f} MB, load {load:.1f}): ncclprobe "
        f"{ours['wall_s']:.1f} s wall, {ours['cpu_s']:.1f} s CPU, {ours['peak_mb']:.0f} MB peak, "
        f"exit {ours['code']}, culprit at line {culprit} of {len(lines)}",
        flush=True,
    )
    if skip_fr:
        return
    theirs = measure(
        [
            sys.executable,
            "-m",
            "torch.distributed.flight_recorder.fr_trace",
            str(path),
            "-p",
            "nccl_trace_rank_",
        ]
    )
    found = "missing ranks" in theirs["out"] + theirs["all_err"]
    print(
        f"{'':5s}       fr_trace {theirs['wall_s']:.1f} s wall, {theirs['cpu_s']:.1f} s CPU, "
        f"{theirs['peak_mb']:.0f} MB peak, found the missing rank: {found}; "
        f"fr_trace / ncclprobe: wall {theirs['wall_s'] / ours['wall_s']:.2f}x, "
        f"CPU {theirs['cpu_s'] / max(ours['cpu_s'], 1e-9):.2f}x",
        flush=True,
    )


def bombs() -> dict[str, bytes]:
    """name -> bytes of a dump that is cheap on disk and costly to load."""
    out = {
        "memo index 2**26 (C unpickler zeroes 1 GB)": b"\x80\x02Nr\x00\x00\x00\x04.",
        "memo index 2**31": b"\x80\x02Nr\x00\x00\x00\x80.",
        "900,000 empty sets (216 bytes each from one byte)": b"\x80\x04("
        + b"\x8f" * 900_000
        + b"l.",
    }
    nested = b"\x80\x02K\x00"  # t0 = 0; t_k = (t_{k-1}, t_{k-1}) through the memo: hash 2**40
    nested += b"q\x00"
    for k in range(40):
        nested += b"h" + bytes([k]) + b"h" + bytes([k]) + b"\x86q" + bytes([k + 1])
    out["tuple key hashed 2**40 times"] = nested + b"}h\x28Ns."
    doc = dump("2.10", 0, [("all_reduce", 8, "completed")])
    doc["entries"][0]["input_sizes"] = [[1] * 64] * 60_000
    doc["entries"] = doc["entries"] * 5000
    out["list shared 10**10 times"] = pickle.dumps(doc, protocol=2)
    return out | {f"gzip of {k}": gzip.compress(v) for k, v in list(out.items())}


def run_bombs(base: Path) -> None:
    folder = base / "bombs"
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in bombs().items():
        path = folder / "nccl_trace_rank_0"
        path.write_bytes(data)
        r = measure([sys.executable, "-m", "ncclprobe", "diagnose", "--flight-recorder", str(path)])
        ok = r["code"] == 2 and r["wall_s"] < 10 and r["peak_mb"] < 500
        print(
            f"{'ok  ' if ok else 'FAIL'} {name}: {len(data):,} bytes, exit {r['code']}, "
            f"{r['wall_s']:.1f} s, {r['peak_mb']:.0f} MB peak: {r['err'][0][:150]}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="64,256,1024")
    parser.add_argument("--calls", default="1000")
    parser.add_argument("--dir", default="/tmp/frscale")
    parser.add_argument("--bombs", action="store_true")
    parser.add_argument("--skip-fr-trace", action="store_true")
    args = parser.parse_args()
    base = Path(args.dir)
    if args.bombs:
        run_bombs(base)
        return
    for calls in map(int, args.calls.split(",")):
        for ranks in map(int, args.ranks.split(",")):
            compare(base, ranks, calls, args.skip_fr_trace)


if __name__ == "__main__":
    main()
