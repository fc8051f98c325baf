"""Why the sweep's worker issues NCCL calls slower than a plain process (issue 32; docs/LOG.md).

    python3 examples/worker_gap.py OUT.json [--repeats N]

The raw path's prepared ctypes loop cost 5.2 µs per out-of-place all_reduce in a plain process
and 7.6-9.9 µs in the sweep's worker, torch's dispatch too (in place 13.4 against 24-37 µs). This
runs the same measurement -- one rank, the prepared ctypes loop at 8 B and 256 KiB (100 calls over
rotating buffers, median of 5 trials after 20 warm-up calls), torch's in-place all_reduce and a
plain torch copy_ per call -- in four places, each a fresh process:

  plain          a plain interpreter, its own FileStore process group
  plain+debug    the same with the sweep's NCCL log settings (nccl.recipes.proof_env, a log file)
  worker         inside ncclprobe's launcher worker (`launch.run_pool`, the sweep's process shape)
  worker+debug   the worker with the sweep's NCCL log settings

and prints per place: the host issue time and the GPU span per call, what the process looked
like (threads, CPU affinity, torch threads) and the NCCL_*/TORCH_*/CUDA_* variables it had.
`--repeats N` runs the four places N times round robin, each time in new processes: the spread
between processes of one place is what a difference between places must exceed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CALLS, WARMUP = 100, 20  # as bench_raw_nccl_calls, whose timed() times each loop
SIZES = (8, 256 << 10)
HERE = Path(__file__).resolve().parent


def measure() -> dict:
    """The loops, in this process (a process group must exist: torch's all_reduce needs one)."""
    import torch
    import torch.distributed as dist
    from bench_raw_nccl_calls import timed as _timed

    from ncclprobe.probes import nccl_ctypes as nc

    lib = nc.Library()
    comm = nc.Communicator(lib, 1, lib.unique_id(), 0)
    side = torch.cuda.Stream()
    out = {"raw": {}, "torch_in_place": {}, "torch_copy": {}}
    for size in SIZES:
        n = max(1, size // 4)
        slots = min(CALLS, (128 << 20) // (n * 4))
        pairs = [
            (torch.ones(n, device="cuda"), torch.zeros(n, device="cuda")) for _ in range(slots)
        ]
        calls = [
            comm.call(
                "ncclAllReduce",
                pairs[k % slots][0].data_ptr(),
                pairs[k % slots][1].data_ptr(),
                n,
                nc.DATA_TYPES["float32"],
                0,
                stream=side.cuda_stream,
            )
            for k in range(CALLS)
        ]
        for _ in range(WARMUP // CALLS + 1):
            comm.issue(calls)
        out["raw"][size] = _timed(lambda calls=calls: comm.issue(calls), side)

        def torch_loop(pairs=pairs, slots=slots):
            for k in range(CALLS):
                dist.all_reduce(pairs[k % slots][0])

        def copy_loop(pairs=pairs, slots=slots):
            for k in range(CALLS):
                pairs[k % slots][1].copy_(pairs[k % slots][0])

        current = torch.cuda.current_stream()
        torch_loop()
        out["torch_in_place"][size] = _timed(torch_loop, current)
        out["torch_copy"][size] = _timed(copy_loop, current)
    comm.destroy()
    out["process"] = {
        "threads": len(os.listdir("/proc/self/task")),
        "cpus_allowed": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "env": {
            k: v
            for k, v in sorted(os.environ.items())
            if k.startswith(("NCCL_", "TORCH_", "CUDA_", "PYTHON", "OMP_"))
        },
    }
    return out


def entry(ctx) -> None:
    """In the launcher's worker (its process group is already initialised)."""
    ctx.emit("result", measured=measure())


def _plain(store: str) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl",
        store=dist.FileStore(store, 1),
        rank=0,
        world_size=1,
        device_id=torch.device("cuda", 0),
    )
    print(json.dumps(measure()))
    dist.destroy_process_group()


def _in_plain_process(env: dict, tmp: Path) -> dict:
    store = tempfile.mktemp(dir=tmp)
    done = subprocess.run(
        [sys.executable, __file__, "--plain", store],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _in_worker(env: dict) -> dict:
    from ncclprobe.launch import PoolSpec, run_pool

    spec = PoolSpec(
        nranks=1,
        backend="nccl",
        entry="worker_gap:entry",
        env={"PYTHONPATH": str(HERE), **env},
        timeout_s=300,
    )
    outcome = run_pool(spec)
    results = outcome.of_kind("result")
    if not results:
        return {"error": f"{outcome.status}: {outcome.reason}", "stderr": outcome.stderr_tails}
    return results[0]["measured"]


def main() -> int:
    if sys.argv[1:2] == ["--plain"]:
        _plain(sys.argv[2])
        return 0
    out_path = Path(sys.argv[1])
    repeats = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 1
    sys.path.insert(0, str(HERE.parent))
    from ncclprobe.nccl.recipes import proof_env, rank_log_env

    with tempfile.TemporaryDirectory() as tmp:
        debug = {**proof_env(), **rank_log_env(tmp, rank=0)}
        places = {
            "plain": lambda: _in_plain_process({}, Path(tmp)),
            "plain+debug": lambda: _in_plain_process(debug, Path(tmp)),
            "worker": lambda: _in_worker({}),
            "worker+debug": lambda: _in_worker(debug),
        }
        doc: dict[str, list] = {name: [] for name in places}
        for _ in range(repeats):  # round robin: a slow period of the machine hits every place
            for name, run in places.items():
                doc[name].append(run())
                raw = doc[name][-1].get("raw", {})
                print(name, {size: row.get("issue_us") for size, row in raw.items()}, flush=True)
    out_path.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
