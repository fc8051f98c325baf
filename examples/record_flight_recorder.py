"""Record real PyTorch Flight Recorder dumps of stuck 2-rank jobs, for `ncclprobe diagnose
--flight-recorder` (issue 27): the dumps, each rank's stderr, torchrun's console and, with NCCL, each
rank's NCCL debug log.

Each scenario is a real job started by torchrun (2 processes by default, --nproc N; one host):
- `skip`: rank 1 never enters the 4th all_reduce (it stays in host code); rank 0 waits in it;
- `size-mismatch`: the 4th all_reduce has 1M elements on rank 0 and 2M on rank 1;
- `order`: after the warm-up, rank 0 issues all_reduce then broadcast, rank 1 broadcast then all_reduce;
- `p2p`: after a matched pair (ranks 0-1, 2-3, ...), rank 0 sends 64 MiB to rank 1, which never
  posts the receive (NCCL only: gloo's Flight Recorder records no send/recv in torch 2.13);
- `groups`: two groups over both ranks; after a warm-up on both, rank 0 waits (host sync) in an
  all_reduce of group A while rank 1 waits in one of group B: each group waits on the other;
- `crash`: the last rank raises ValueError in host code before the 4th all_reduce (a bad batch)
  and exits with it; the others wait in it until torchrun stops them (SIGTERM): a rank that died,
  not one that stays away (gloo: the failing rank dumps and signals the others first, as below);
- `healthy`: the same collectives on every rank (and a send/recv between ranks 0-1, 2-3, ...; the
  last rank of an odd count has no partner); it finishes.

How each rank's dump is written:
- NCCL: on the watchdog's timeout (`TORCH_NCCL_DUMP_ON_TIMEOUT=1`; the timed-out rank signals the
  others through the store, and they dump too), to `TORCH_FR_DUMP_TEMP_FILE=<dir>/dumps/nccl_trace_rank_`;
  a run that finishes (healthy, or a mismatch NCCL happened to complete) dumps explicitly at the end
  (`torch._C._distributed_c10d._dump_nccl_trace()`, the same pickle), and also as JSON into json/.
- gloo (CPU): gloo has no dump on timeout, so the script does what NCCL's watchdog does: a rank whose
  collective fails (gloo's timeout is an exception) dumps explicitly (pickle, and JSON into json/),
  sets a key in the job's store and re-raises (the job fails as it would); every rank watches that
  key from a thread and dumps when it appears (the signal NCCL ranks get through the store). A
  run that finishes dumps at the end.
Both spellings of each variable are set (`TORCH_FR_*` and the older `TORCH_NCCL_*`). The per-rank
settings (`NCCL_HOSTID`, `NCCL_DEBUG_FILE`) are set by each worker in its own environment before
the process group is created, since torchrun gives every rank the same environment. With NCCL both
ranks share GPU 0 (distinct `NCCL_HOSTID`: NCCL talks over sockets), `NCCL_NVLS_ENABLE=0`.

  python examples/record_flight_recorder.py OUT --backend gloo|nccl [--scenario NAME ...]
      [--timeout-s 10] [--nproc 2] [--detail] [--record-errors]

--nproc N runs N ranks (the last rank is the one that skips, the odd ranks issue the other order, each
rank's size mismatch is its own); --record-errors wraps each rank in torch's `@record` (torchrun's
failure summary then carries the failed rank's traceback); --detail sets TORCH_DISTRIBUTED_DEBUG=DETAIL,
whose wrapper checks every collective across ranks before it runs (gloo's only log lines with
sequence numbers and sizes).

writes OUT/<backend>/<scenario>/{dumps/nccl_trace_rank_N, json/nccl_trace_rank_N, rankN.stderr,
torchrun.log, nccl-rankN.log, fr_trace.txt, scenario.json}; fr_trace.txt is PyTorch's own analyzer
(`python -m torch.distributed.flight_recorder.fr_trace`) on the dumps, as a reference. Scenarios run
concurrently; each is killed at a deadline (5x the timeout + 60 s) if it has not ended by then.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(
    0, str(ROOT)
)  # the repository's NCCL recipes, also where ncclprobe is not installed
from ncclprobe.nccl.recipes import NO_NVLS, proof_env  # noqa: E402

SCENARIOS = ("skip", "size-mismatch", "order", "p2p", "groups", "crash", "healthy")
NOT_ON_GLOO = {"p2p": "gloo's Flight Recorder records no send/recv (torch 2.13)"}
DUMP_PREFIX = "nccl_trace_rank_"
DUMP_SIGNAL = "record_flight_recorder/dump"
WARMUP = 3  # all_reduces every scenario issues first: collective seq 1..3 of the default group
ELEMENTS = 1 << 20  # 4 MiB of float32


# ---- the parent: one torchrun job per scenario ----------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_env(backend: str, directory: Path, detail: bool = False) -> dict[str, str]:
    prefix = str(directory / "dumps" / DUMP_PREFIX)
    env = {
        **os.environ,
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_FR_DUMP_TEMP_FILE": prefix,
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_ENABLE_TIMING": "1",
        "OMP_NUM_THREADS": "1",
    }
    if detail:
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    if backend == "nccl":
        # NCCL_DEBUG=INFO (its default subsystems) and NVLink multicast off, from their one home
        env.update(
            {"NCCL_DEBUG": proof_env()["NCCL_DEBUG"], **NO_NVLS, "CUDA_VISIBLE_DEVICES": "0"}
        )
    return env


def start(scenario: str, args, out: Path) -> tuple[subprocess.Popen, Path, float]:
    directory = out / args.backend / scenario
    if directory.exists():
        shutil.rmtree(directory)
    (directory / "dumps").mkdir(parents=True)
    (directory / "json").mkdir()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(args.nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "--tee",
        "3",
        "--log-dir",
        str(directory / "torchrun-logs"),
        str(Path(__file__).resolve()),
        "--worker",
        scenario,
        "--backend",
        args.backend,
        "--timeout-s",
        str(args.timeout_s),
        *(["--record-errors"] if args.record_errors else []),
        str(directory),
    ]
    print(f"{args.backend}/{scenario}: $ {' '.join(command)}", file=sys.stderr, flush=True)
    console = open(directory / "torchrun.log", "w")
    proc = subprocess.Popen(
        command,
        stdout=console,
        stderr=subprocess.STDOUT,
        env=job_env(args.backend, directory, args.detail),
        start_new_session=True,
    )
    console.close()
    return proc, directory, time.monotonic()


def wait_all(running: list, args) -> dict[str, tuple[float, bool]]:
    """Each job's wall time, taken when it ends (all are watched at once), and whether it was killed
    at its deadline (5x the timeout + 60 s)."""
    ended: dict[str, tuple[float, bool]] = {}
    while len(ended) < len(running):
        for scenario, proc, _, began in running:
            if scenario in ended:
                continue
            if proc.poll() is not None:
                ended[scenario] = (time.monotonic() - began, False)
            elif time.monotonic() > began + 5 * args.timeout_s + 60:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                ended[scenario] = (time.monotonic() - began, True)
        time.sleep(0.2)
    return ended


def finish(scenario: str, proc, directory: Path, wall: float, killed: bool, args) -> dict:
    _flatten_rank_logs(directory)
    manifest = {
        "scenario": scenario,
        "backend": args.backend,
        "timeout_s": args.timeout_s,
        "torchrun_exit": proc.returncode,
        "killed_at_deadline": killed,
        "wall_s": round(wall, 1),
        "dumps": sorted(p.name for p in (directory / "dumps").iterdir()),
        "json_dumps": sorted(p.name for p in (directory / "json").iterdir()),
        "versions": _versions(),
        "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    manifest["analyzer_exit"] = _reference_analyzer(directory)
    (directory / "scenario.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(
        f"{args.backend}/{scenario}: exit {proc.returncode}, {wall:.1f} s, dumps {manifest['dumps']}",
        file=sys.stderr,
        flush=True,
    )
    return manifest


def _flatten_rank_logs(directory: Path) -> None:
    """torchrun's per-rank logs (<log-dir>/<run id>/attempt_0/<rank>/stderr.log) as rankN.stderr."""
    logs = directory / "torchrun-logs"
    for stderr in sorted(logs.glob("*/attempt_*/*/stderr.log")):
        shutil.copyfile(stderr, directory / f"rank{stderr.parent.name}.stderr")
    shutil.rmtree(logs, ignore_errors=True)


def _versions() -> dict:
    import torch

    versions = {"torch": torch.__version__}
    if torch.cuda.is_available():
        versions["cuda"] = torch.version.cuda
        versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        versions["gpu"] = torch.cuda.get_device_name(0)
    return versions


def _reference_analyzer(directory: Path) -> int | None:
    """PyTorch's analyzer on the dumps (our own recordings only), its output kept as fr_trace.txt."""
    if not any((directory / "dumps").iterdir()):
        return None
    command = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
    command += [str(directory / "dumps"), "-p", DUMP_PREFIX]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        (directory / "fr_trace.txt").write_text("no answer within 60 s\n")
        return None
    (directory / "fr_trace.txt").write_text(f"$ {' '.join(command)}\n{proc.stdout}{proc.stderr}")
    return proc.returncode


def record(args) -> int:
    out = Path(args.output)
    chosen = [s for s in args.scenario or SCENARIOS]
    if args.backend == "gloo":
        for name in [s for s in chosen if s in NOT_ON_GLOO]:
            print(f"gloo/{name}: skipped, {NOT_ON_GLOO[name]}", file=sys.stderr)
        chosen = [s for s in chosen if s not in NOT_ON_GLOO]
    running = [(s, *start(s, args, out)) for s in chosen]
    ended = wait_all(running, args)
    manifests = [finish(s, proc, d, *ended[s], args) for s, proc, d, _ in running]
    (out / args.backend / "recorded.json").write_text(json.dumps(manifests, indent=1) + "\n")
    return 0


# ---- the worker: one rank of a scenario ----------------------------------------------------


class Rank:
    """One rank's view of the job: its process group, tensors on its device, dumps on demand."""

    def __init__(self, backend: str, directory: Path, timeout_s: float):
        self.rank = int(os.environ["RANK"])
        self.backend, self.directory = backend, directory
        self.dumping = threading.Lock()  # the watching thread and the main thread may both dump
        self.finished, self.watcher = threading.Event(), None
        self.timeout = datetime.timedelta(seconds=timeout_s)
        if backend == "nccl":
            # per rank, before NCCL starts: two ranks on one GPU must look like two hosts
            os.environ["NCCL_HOSTID"] = f"fr-{directory.name}-rank{self.rank}"
            os.environ["NCCL_DEBUG_FILE"] = str(directory / f"nccl-rank{self.rank}.log")
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
        if backend == "nccl":
            torch.cuda.set_device(self.device)
        dist.init_process_group(backend, timeout=self.timeout)
        if backend == "gloo":
            self.watch_for_dump_signal()

    def tensor(self, elements: int = ELEMENTS):
        return self.torch.ones(elements, device=self.device)

    def group(self, desc: str):
        ranks = list(range(self.dist.get_world_size()))
        return self.dist.new_group(ranks, timeout=self.timeout, group_desc=desc)

    def sync(self) -> None:
        """The host waits for the GPU, as `.item()` or a metric would (NCCL); gloo already waited."""
        if self.backend == "nccl":
            self.torch.cuda.synchronize()

    def warmup(self, *groups) -> None:
        x = self.tensor()
        for _ in range(WARMUP):
            self.dist.all_reduce(x)
        for group in groups:
            self.dist.all_reduce(x, group=group)
        self.sync()

    def stay_in_host_code(self) -> None:
        """A rank stuck outside the collectives (a data loader, a host-side wait); its dump comes
        from the peers' signal (NCCL: the watchdog's; gloo: `watch_for_dump_signal`)."""
        time.sleep(3 * self.timeout.total_seconds() + 20)

    def watch_for_dump_signal(self) -> None:
        """gloo: dump when a peer has signalled a failure through the store (NCCL does this itself)."""
        store = self.dist.distributed_c10d._get_default_store()

        def watch():
            while not self.finished.wait(0.2):
                if store.check([DUMP_SIGNAL]):
                    self.dump()
                    return

        self.watcher = threading.Thread(target=watch, daemon=True)
        self.watcher.start()

    def stop_watching(self) -> None:
        """Before the group goes: a watcher still asking the store as the process exits aborted a
        rank of a finished gloo job (`terminate called without an active exception`)."""
        self.finished.set()
        if self.watcher is not None:
            self.watcher.join()

    def fail(self) -> None:
        """gloo: the collective failed here: dump, tell the peers, give them time to dump."""
        self.dump()
        self.dist.distributed_c10d._get_default_store().set(DUMP_SIGNAL, str(self.rank))
        time.sleep(3.0)

    def dump(self) -> None:
        """The Flight Recorder's pickle (and JSON) of this rank, written whole or not at all; the
        first dump of a rank is kept."""
        with self.dumping:
            self._dump()

    def _dump(self) -> None:
        c10d = self.torch._C._distributed_c10d
        own = ("_dump_nccl_trace",) if self.backend == "nccl" else ()
        pickle_call = next(getattr(c10d, n) for n in (*own, "_dump_fr_trace") if hasattr(c10d, n))
        json_names = [f"{n}_json" for n in (*own, "_dump_fr_trace") if hasattr(c10d, f"{n}_json")]
        name = f"{DUMP_PREFIX}{self.rank}"
        writes = [("dumps", pickle_call)] + [("json", getattr(c10d, n)) for n in json_names[:1]]
        for folder, call in writes:
            target = self.directory / folder / name
            if target.exists():
                continue  # the dump on timeout (or on a peer's signal) came first: keep it
            data = call()
            data = data.encode() if isinstance(data, str) else data
            temporary = target.with_name(f".{name}.tmp")
            temporary.write_bytes(data)
            temporary.rename(target)


def skip(r: Rank) -> None:
    r.warmup()
    if r.rank == r.dist.get_world_size() - 1:  # the last rank is the late one
        r.stay_in_host_code()
        return
    r.dist.all_reduce(r.tensor())
    r.sync()


def size_mismatch(r: Rank) -> None:
    r.warmup()
    r.dist.all_reduce(r.tensor(ELEMENTS * (1 + r.rank)))
    r.sync()


def order(r: Rank) -> None:
    r.warmup()
    reduced, broadcast = r.tensor(ELEMENTS), r.tensor(ELEMENTS // 4)
    calls = [lambda: r.dist.all_reduce(reduced), lambda: r.dist.broadcast(broadcast, src=0)]
    for call in calls if r.rank % 2 == 0 else calls[::-1]:  # odd ranks: the other order
        call()
    r.sync()


def partner(rank: int, world: int) -> int | None:
    """The rank a send/recv pairs this one with: 0-1, 2-3, ...; the last rank of an odd world has
    none (pairing r with 1 - r sent rank 2 of three to peer -1, whose communicator never formed)."""
    other = rank ^ 1
    return other if other < world else None


def exchange(r: Rank, x) -> None:
    """A matched send/recv between partners: the even rank sends, the odd one receives."""
    peer = partner(r.rank, r.dist.get_world_size())
    if peer is not None:
        (r.dist.send if r.rank % 2 == 0 else r.dist.recv)(x, peer)


def p2p(r: Rank) -> None:
    r.warmup()
    exchange(r, r.tensor())  # a matched pair first
    r.sync()
    if r.rank == 1:
        r.stay_in_host_code()
        return
    if r.rank == 0:
        r.dist.send(r.tensor(16 * ELEMENTS), 1)
    r.sync()


def groups(r: Rank) -> None:
    a, b = r.group("group_a"), r.group("group_b")
    r.warmup(a, b)
    x = r.tensor()
    first, second = (a, b) if r.rank == 0 else (b, a)
    r.dist.all_reduce(x, group=first)
    r.sync()
    r.dist.all_reduce(x, group=second)
    r.sync()


def crash(r: Rank) -> None:
    r.warmup()
    if r.rank == r.dist.get_world_size() - 1:  # the last rank fails in its own code
        raise ValueError(f"step {WARMUP + 1}: batch of 0 samples on rank {r.rank}")
    r.dist.all_reduce(r.tensor())
    r.sync()


def healthy(r: Rank) -> None:
    x, y = r.tensor(), r.tensor(ELEMENTS // 4)
    r.warmup()
    r.dist.broadcast(y, src=0)
    gathered = r.torch.empty(r.dist.get_world_size() * ELEMENTS, device=r.device)
    r.dist.all_gather_into_tensor(gathered, x)
    exchange(r, y)  # gloo runs it too, though its Flight Recorder records no send/recv
    r.dist.all_reduce(x)
    r.sync()


BODIES = {
    "skip": skip,
    "size-mismatch": size_mismatch,
    "order": order,
    "p2p": p2p,
    "groups": groups,
    "crash": crash,
    "healthy": healthy,
}


def work(args) -> int:
    r = Rank(args.backend, Path(args.output), args.timeout_s)
    try:
        BODIES[args.worker](r)
    except Exception:
        if args.backend == "gloo":
            r.fail()  # gloo's timeout is an exception here: dump, signal, then fail as the job would
        raise
    r.sync()
    r.dump()
    r.stop_watching()
    r.dist.destroy_process_group()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "output", help="directory for the recordings (scenario folders go under it)"
    )
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS)
    parser.add_argument("--timeout-s", type=float, default=10.0, help="collective timeout")
    parser.add_argument("--nproc", type=int, default=2, help="ranks per job (2 or more)")
    parser.add_argument("--detail", action="store_true", help="TORCH_DISTRIBUTED_DEBUG=DETAIL")
    parser.add_argument("--worker", choices=SCENARIOS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--record-errors",
        action="store_true",
        help="wrap each rank in torch's @record: torchrun's summary then holds the failed rank's traceback",
    )
    args = parser.parse_args()
    if args.worker and args.record_errors:
        from torch.distributed.elastic.multiprocessing.errors import record as record_errors

        return record_errors(work)(args)
    return work(args) if args.worker else record(args)


if __name__ == "__main__":
    sys.exit(main())
