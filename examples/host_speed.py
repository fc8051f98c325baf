"""What sets a process's host speed on the GPU machine (issue 32; docs/LOG.md 2026-12-02 and later).

    python3 examples/host_speed.py drive OUT_DIR [--nccl-tests DIR] [--rounds N] [--cores 0,5,]

On the H200 VM every new process issued NCCL calls at one of two speeds (about 5.8-6.2 or 8.2-9.5
µs per out-of-place all_reduce at 8 B), nccl-tests' processes too, and pinning a process to four
cores did not remove it. This runs, each time in a new process, the raw path's prepared ctypes loop
(one rank, 100 out-of-place all_reduce calls over rotating buffers, median of 5 trials after 20
warm-up calls, at 8 B and 64 KiB) and, with --nccl-tests, `all_reduce_perf -b 8 -e 64K -f 8192`:

  free      no pinning (the CPU the loop ran on is read with sched_getcpu before and after)
  core C    `taskset -c C` for every CPU C the machine has (or those --cores lists; "" for none)
  node N    `numactl --cpunodebind=N --membind=N` for every NUMA node (where numactl exists)

and writes one JSON document: the machine (lscpu, NUMA nodes, the GPU's NUMA node) and every
process's figures. If the speed follows the core or the node, both tools can be held to the fast one.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

CALLS, WARMUP = 100, 20  # as bench_raw_nccl_calls, whose timed() times the loop
SIZES = (8, 64 << 10)
HERE = Path(__file__).resolve().parent


def _getcpu() -> int:
    """The CPU this thread runs on (glibc's sched_getcpu; Python's os has none)."""
    return ctypes.CDLL(None).sched_getcpu()


def measure() -> dict:
    """The prepared ctypes loop in this process, with the CPUs it ran on."""
    import torch

    from ncclprobe.probes import nccl_ctypes as nc

    torch.cuda.set_device(0)
    lib = nc.Library()
    comm = nc.Communicator(lib, 1, lib.unique_id(), 0)
    side = torch.cuda.Stream()
    out: dict = {"cpus_seen": set(), "raw_us": {}}
    for size in SIZES:
        n = max(1, size // 4)
        pairs = [
            (torch.ones(n, device="cuda"), torch.zeros(n, device="cuda")) for _ in range(CALLS)
        ]
        for placement in ("out", "in"):
            calls = [
                comm.call(
                    "ncclAllReduce",
                    s.data_ptr(),
                    (r if placement == "out" else s).data_ptr(),
                    n,
                    nc.DATA_TYPES["float32"],
                    0,
                    stream=side.cuda_stream,
                )
                for s, r in pairs
            ]
            out["raw_us"][f"{placement} {size}"] = _trials(comm, calls, side, out["cpus_seen"])
    comm.destroy()
    out["cpus_seen"] = sorted(out["cpus_seen"])
    out["affinity"] = sorted(os.sched_getaffinity(0))
    return out


def _trials(comm, calls, side, cpus_seen: set) -> dict:
    """Median µs per call over the bench's trials (bench_raw_nccl_calls.timed), after WARMUP
    calls, with the CPUs the loop ran on before and after."""
    from bench_raw_nccl_calls import timed

    comm.issue(calls[:WARMUP])
    cpus_seen.add(_getcpu())
    figures = timed(lambda: comm.issue(calls), side)
    cpus_seen.add(_getcpu())
    return figures


def _run(prefix: list[str], argv: list[str], timeout: int = 120) -> tuple[int, str, str]:
    done = subprocess.run(
        prefix + argv, capture_output=True, text=True, timeout=timeout, env=os.environ.copy()
    )
    return done.returncode, done.stdout, done.stderr[-1500:]


def _ours(prefix: list[str]) -> dict:
    rc, out, err = _run(prefix, [sys.executable, __file__, "measure"])
    if rc:
        return {"error": err}
    return json.loads(out.strip().splitlines()[-1])


def _nccl_tests(prefix: list[str], binary: Path) -> dict:
    rc, out, err = _run(
        prefix,
        [
            str(binary),
            "-b",
            "8",
            "-e",
            "64K",
            "-f",
            "8192",
            "-g",
            "1",
            "-w",
            "20",
            "-n",
            "100",
            "-c",
            "0",
        ],
    )
    if rc:
        return {"error": err or out[-1500:]}
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) > 6 and cells[0].isdigit() and int(cells[0]) in SIZES:
            rows[cells[0]] = {"out_of_place_us": float(cells[5]), "in_place_us": float(cells[9])}
    return {"us": rows}


def _machine() -> dict:
    def text(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"unavailable: {err}"

    nodes = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    node_cpus = {
        n: Path(f"/sys/devices/system/node/{n}/cpulist").read_text().strip() for n in nodes
    }
    bus = text(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"]).strip().lower()
    domain, _, rest = bus.partition(":")
    numa = Path(f"/sys/bus/pci/devices/{domain[-4:]}:{rest}/numa_node")
    gpu_node = numa.read_text() if rest and numa.exists() else f"not found ({bus!r})"
    return {
        "lscpu": text(["lscpu"]),
        "numa_nodes": node_cpus,
        "gpu_numa_node": gpu_node.strip(),
        "nvidia_smi_topo": text(["nvidia-smi", "topo", "-m"]),
        "governor": text(
            ["bash", "-c", "cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1"]
        ),
    }


def drive(out_dir: Path, nccl_tests: Path | None, rounds: int, cores: list[int] | None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    doc: dict = {"machine": _machine(), "runs": []}
    places: list[tuple[str, list[str]]] = [("free", [])]
    places += [
        (f"core {c}", ["taskset", "-c", str(c)])
        for c in (cores if cores is not None else sorted(os.sched_getaffinity(0)))
    ]
    if shutil.which("numactl"):
        for node in doc["machine"]["numa_nodes"]:
            k = node.removeprefix("node")
            places.append((f"node {k}", ["numactl", f"--cpunodebind={k}", f"--membind={k}"]))
    binary = nccl_tests / "all_reduce_perf" if nccl_tests else None
    for r in range(rounds):
        for name, prefix in places:
            row = {"round": r, "place": name, "ours": _ours(prefix)}
            if binary:
                row["nccl_tests"] = _nccl_tests(prefix, binary)
            doc["runs"].append(row)
            ours = row["ours"].get("raw_us", {}).get("out 8", {}).get("gpu_us")
            theirs = row.get("nccl_tests", {}).get("us", {}).get("8", {}).get("out_of_place_us")
            print(
                f"round {r} {name}: ours 8 B {ours} µs, nccl-tests {theirs} µs, cpus {row['ours'].get('cpus_seen')}",
                flush=True,
            )
            (out_dir / "host_speed.json").write_text(json.dumps(doc, indent=1))


def main() -> int:
    if sys.argv[1:2] == ["measure"]:
        sys.path[:0] = [str(HERE.parent), str(HERE)]
        print(json.dumps(measure()))
        return 0
    if sys.argv[1:2] != ["drive"] or len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    nt = Path(sys.argv[sys.argv.index("--nccl-tests") + 1]) if "--nccl-tests" in sys.argv else None
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 1
    cores = None
    if "--cores" in sys.argv:
        text = sys.argv[sys.argv.index("--cores") + 1]
        cores = [int(c) for c in text.split(",") if c]
    drive(Path(sys.argv[2]), nt, rounds, cores)
    return 0


if __name__ == "__main__":
    sys.exit(main())
