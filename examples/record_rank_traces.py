"""Record two-rank traces where one rank is late, and their healthy twin (issue 26 fixtures).

Two processes share one GPU (each its own NCCL_HOSTID, so NCCL talks over NET/Socket; NVLS off;
gloo on CPU with --device cpu) and run a tensor-parallel-shaped step loop: per layer, GEMMs of a
column- then row-parallel attention projection, an all-reduce of batch x hidden bf16 elements, the
same for the MLP, a second all-reduce; after the layers an argmax read back to the host (the
sampling sync every serving step has). No step annotations. After --warmup unprofiled steps, both
ranks profile --steps steps (torch.profiler, CPU+CUDA, record_shapes=True). Scenarios:
  healthy          no delay: the twin
  host_late        the late rank busy-waits --delay-ms on the host before each step (a spin on
                   time.perf_counter_ns, standing for host work; not time.sleep, which can overshoot)
  gpu_late         the late rank runs its own chain of square GEMMs (~--gpu-delay-ms, calibrated
                   with CUDA events before the warm-up) before each step's layers
  graph_host_late  as host_late, the layers captured once into a CUDA graph and replayed each step
                   (kernels replayed from a graph carry no collective metadata)
Why delays of 20 ms (host) and 10 ms (GPU, alone) by default: two processes on one GPU take turns
in time slices (~2.2 ms on the H200: every NCCL kernel there lasts ~4.4 ms, healthy or not, and a
step of 16 all-reduces ~73 ms); a 2 ms delay disappeared in that (recorded 2026-12-01: the waiting
rank's first all-reduce per step only ~0.15 ms longer than in the healthy twin).
--world N records N ranks (gloo on the CPU: issue 36's jobs); --job ddp runs a plain data-parallel
training step (DistributedDataParallel over a 2-layer MLP, SGD) instead of the layer loop, and
--step-marks writes torch.profiler's ProfilerStep#N (a schedule of one window of every step), as a
training loop with a profiler schedule does; --delay-kind sleep frees the late rank's core (more ranks
than cores); --nccl-env NCCL_X=V exports a setting in every rank (examples/proto_baseline_gpu.py).
Per scenario: `<prefix>_<scenario>_rank<R>.json.gz` and `<prefix>_<scenario>.truth.json` (late rank, chosen
and measured delay, steps, layers, collective size, each step's host start per rank on the Unix
clock and the trace's axis, each rank's clock bases).

  python examples/record_rank_traces.py --out DIR [--device cuda] [--only healthy,host_late,...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

SCENARIOS = ("healthy", "host_late", "gpu_late", "graph_host_late")
WORLD = 2
TEARDOWN_GRACE_S = 20  # a rank still alive this long after writing its results is killed


def parse_args(argv=None) -> argparse.Namespace:
    """Checked before torch is imported: bad input costs one line and exit 2."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="a new or empty directory")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"of {', '.join(SCENARIOS)}")
    parser.add_argument("--steps", type=int, default=30, help="profiled steps")
    parser.add_argument("--warmup", type=int, default=8, help="unprofiled steps before them")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=7168, help="all-reduce: batch x hidden")
    parser.add_argument("--batch", type=int, default=4, help="tokens per step")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="host_late: the spin")
    parser.add_argument("--gpu-delay-ms", type=float, default=10.0, help="gpu_late: the GEMMs")
    parser.add_argument("--world", type=int, default=WORLD, help="ranks (processes)")
    parser.add_argument("--late-rank", type=int, default=1)
    parser.add_argument("--prefix", default="ranks", help="file names: PREFIX_<scenario>_rank<R>")
    parser.add_argument(
        "--job",
        default="tp",
        choices=("tp", "ddp"),
        help="tp: the tensor-parallel layer loop; ddp: a data-parallel training step "
        "(DistributedDataParallel over a 2-layer MLP, SGD): a plain PyTorch job",
    )
    parser.add_argument(
        "--delay-kind",
        default="spin",
        choices=("spin", "sleep"),
        help="host_late's delay: a busy loop (exact, holds a core) or time.sleep (frees the core: "
        "for more ranks than cores)",
    )
    parser.add_argument(
        "--nccl-env",
        action="append",
        default=[],
        metavar="NCCL_X=VALUE",
        help="an NCCL setting every rank exports before its communicator exists (repeatable)",
    )
    parser.add_argument(
        "--step-marks",
        action="store_true",
        help="call the profiler's step() after each step (ProfilerStep#N annotations, as a "
        "training loop with a profiler schedule writes them)",
    )
    parser.add_argument("--timeout-s", type=float, default=150.0, help="per scenario")
    opts = parser.parse_args(argv)
    names = [n.strip() for n in opts.only.split(",") if n.strip()]
    if not names or any(n not in SCENARIOS for n in names):
        parser.error(f"--only: choose from {', '.join(SCENARIOS)}")
    if opts.job == "ddp" and ("gpu_late" in names or "graph_host_late" in names):
        parser.error("--job ddp records healthy and host_late only")
    if opts.device == "cpu" and "graph_host_late" in names:
        parser.error("graph_host_late needs CUDA graphs: leave it out with --device cpu")
    opts.only = names
    for item in opts.nccl_env:
        key, sep, _ = item.partition("=")
        if not sep or not key.startswith("NCCL_") or not key.replace("_", "").isalnum():
            parser.error(f"--nccl-env {item!r}: NCCL_NAME=VALUE")
    if not 2 <= opts.world <= 64 or not 0 <= opts.late_rank < opts.world:
        parser.error("--world must be 2..64 and --late-rank one of its ranks")
    if not opts.prefix.replace("_", "").replace("-", "").isalnum():
        parser.error("--prefix: letters, digits, '_' and '-' only")
    for name in ("steps", "warmup", "layers", "hidden", "batch"):
        if getattr(opts, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if opts.hidden % 4:
        parser.error("--hidden must be a multiple of 4")
    if not (0 < opts.delay_ms < 1000 and 0 < opts.gpu_delay_ms < 1000 and opts.timeout_s > 0):
        parser.error("--delay-ms and --gpu-delay-ms must be in (0, 1000), --timeout-s positive")
    if opts.out.exists() and (not opts.out.is_dir() or any(opts.out.iterdir())):
        parser.error(f"--out {opts.out} must be a new or empty directory")
    return opts


class DDPStep:
    """A plain data-parallel training step: a 2-layer MLP wrapped in DistributedDataParallel,
    forward, backward (DDP all-reduces the gradients in buckets) and an SGD step."""

    def __init__(self, opts, device, dtype):
        import torch
        from torch.nn.parallel import DistributedDataParallel

        h = opts.hidden
        torch.manual_seed(1234)
        net = torch.nn.Sequential(torch.nn.Linear(h, h), torch.nn.ReLU(), torch.nn.Linear(h, h)).to(
            device=device, dtype=dtype
        )
        self.model = DistributedDataParallel(net)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.x = torch.randn(opts.batch, h, device=device, dtype=dtype)

    def layers_forward(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.model(self.x).square().mean()
        loss.backward()
        self.opt.step()
        return loss.detach().reshape(1)


class TPStep:
    """One rank's half of a tensor-parallel layer stack: per layer x @ A (h -> h/2) @ B (h/2 -> h),
    all-reduce, @ C (h -> 2h) @ D (2h -> h), all-reduce; then the sampling read-back."""

    def __init__(self, opts, device, dtype):
        import torch

        h = opts.hidden
        gen = torch.Generator(device=device).manual_seed(1234)

        def weight(rows, cols):
            return torch.randn(rows, cols, device=device, dtype=dtype, generator=gen) / rows**0.5

        self.layers = [
            (weight(h, h // 2), weight(h // 2, h), weight(h, 2 * h), weight(2 * h, h))
            for _ in range(opts.layers)
        ]
        self.x = torch.randn(opts.batch, h, device=device, dtype=dtype, generator=gen)

    def layers_forward(self):
        import torch.distributed as dist

        x = self.x
        for a, b, c, d in self.layers:
            attn = (x @ a) @ b
            dist.all_reduce(attn)
            x = x + attn
            mlp = (x @ c) @ d
            dist.all_reduce(mlp)
            x = x + mlp
        return x


def worker(rank: int, scenario: str, opts, port: int) -> None:
    os.environ["NCCL_HOSTID"] = f"trace-fixtures-rank{rank}"
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    for item in opts.nccl_env:
        key, _, value = item.partition("=")
        os.environ[key] = value
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]  # trace_recording; ncclprobe from the tree
    from trace_recording import export_trace, say, trace_us, write_json

    cuda = opts.device == "cuda"
    if not cuda:  # ranks share the host's cores: a thread per core in each would spin on each other
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // opts.world))
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=opts.world,
        timeout=timedelta(seconds=opts.timeout_s),
    )
    dtype = torch.bfloat16 if cuda else torch.float32
    model = (DDPStep if opts.job == "ddp" else TPStep)(opts, device, dtype)
    late = rank == opts.late_rank and scenario != "healthy"
    extra = GemmChain(opts.gpu_delay_ms, device, dtype) if late and scenario == "gpu_late" else None
    graph, out = None, None
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    records = []

    def step(profiled: bool):
        nonlocal out
        rec = {"start_ns": time.time_ns()}
        if late and scenario in ("host_late", "graph_host_late"):
            (spin_ms if opts.delay_kind == "spin" else lambda ms: time.sleep(ms / 1000.0))(
                opts.delay_ms
            )
            rec["host_delay_end_ns"] = time.time_ns()
        if extra is not None:
            rec["extra_gemm_ms"] = extra.run(timed=not profiled)
        if graph is not None:
            graph.replay()
        else:
            out = model.layers_forward()
        rec["sampled"] = int(out[0].argmax().item())  # the per-step sync, like sampling
        rec["end_ns"] = time.time_ns()
        return rec

    for _ in range(opts.warmup):
        records.append(step(False))
    if scenario == "graph_host_late":  # the project's capture idiom: side-stream warm-up, capture
        from ncclprobe.cudagraph import capture_graph

        graph, out = capture_graph(model.layers_forward)
        for _ in range(3):  # replays before the profiled ones
            records.append(step(False))
    warm = records
    dist.barrier()
    sync()
    clock = {"time_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    path = opts.out / f"{opts.prefix}_{scenario}_rank{rank}.json.gz"
    exported = {}
    # ProfilerStep#N annotations are written only under a schedule: one window of every step,
    # handed over (and exported) when its last step() closes it
    marks = (
        {
            "schedule": schedule(wait=0, warmup=0, active=opts.steps, repeat=1),
            "on_trace_ready": lambda p: exported.setdefault("trace", export_trace(p, path)),
        }
        if opts.step_marks
        else {}
    )
    with profile(activities=activities, record_shapes=True, with_stack=False, **marks) as prof:
        steps = []
        for _ in range(opts.steps):
            steps.append(step(True))
            if opts.step_marks:
                prof.step()
        sync()
    trace = exported["trace"] if opts.step_marks else export_trace(prof, path)
    base = trace["baseTimeNanoseconds"]
    for rec in steps:
        rec["start_trace_us"] = trace_us(rec["start_ns"], base)
    doc = {
        "rank": rank,
        "late": late,
        "clock_bases": {**clock, "trace_baseTimeNanoseconds": base},
        "steps": steps,
        "warmup_steps": warm,
        "extra_gemms": extra.describe() if extra else None,
        "trace": trace,
        "env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
    }
    write_json(part_path(opts, rank, scenario), doc)
    say(f"  {scenario} rank {rank}: {trace['bytes'] / 1e6:.2f} MB, {trace['counts']}")
    graph = None  # freed before the communicator goes: it holds captured NCCL kernels
    sync()
    dist.barrier()
    dist.destroy_process_group()


def spin_ms(ms: float) -> None:
    """Host work standing in for a scheduler's or sampler's: a busy loop, so the time is exact."""
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass


class GemmChain:
    """The late rank's own GPU work: n square GEMMs of `size`, n chosen so the chain takes about
    `target_ms` when the GPU is otherwise idle (measured with CUDA events, median of 5)."""

    def __init__(self, target_ms: float, device, dtype, size: int = 4096):
        import torch

        self.cuda = device.type == "cuda"
        self.size = size if self.cuda else 256
        self.a = torch.randn(self.size, self.size, device=device, dtype=dtype) / self.size**0.5
        self.n, self.target_ms = 1, target_ms
        self.run(timed=False)  # the first GEMM creates cuBLAS's handle and workspace: not timed
        per = sorted(self.run(timed=True) for _ in range(5))[2]
        self.alone_ms_per_gemm = per
        self.n = max(1, round(target_ms / per))
        self.calibrated_ms = sorted(self.run(timed=True) for _ in range(5))[2]

    def run(self, timed: bool) -> float | None:
        import torch

        if not timed:
            self._chain()
            return None
        if not self.cuda:
            t0 = time.perf_counter()
            self._chain()
            return (time.perf_counter() - t0) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self._chain()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def _chain(self):
        y = self.a
        for _ in range(self.n):
            y = y @ self.a
        return y

    def describe(self) -> dict:
        return {
            "gemms": self.n,
            "size": self.size,
            "target_ms": self.target_ms,
            "alone_ms_per_gemm": self.alone_ms_per_gemm,
            "chain_ms_alone": self.calibrated_ms,
        }


def run_scenario(scenario: str, opts) -> dict:
    import torch.multiprocessing as mp
    from trace_recording import say

    port = free_port()
    say(f"{scenario}: {opts.world} ranks on {opts.device}, rendezvous on port {port}")
    context = mp.start_processes(
        worker, args=(scenario, opts, port), nprocs=opts.world, join=False, start_method="spawn"
    )
    deadline, parts = (
        time.monotonic() + opts.timeout_s,
        [part_path(opts, r, scenario) for r in range(opts.world)],
    )
    written, teardown = None, "clean"
    while not context.join(timeout=2):
        now = time.monotonic()
        if written is None and all(p.exists() for p in parts):
            written = now
        if written is not None and now - written > TEARDOWN_GRACE_S:
            teardown = f"killed: still running {TEARDOWN_GRACE_S} s after both ranks wrote results"
            break
        if now > deadline:
            break
    if teardown != "clean" or not context.join(timeout=0):
        for proc in context.processes:
            proc.kill()
    if written is None:
        raise TimeoutError(f"{scenario}: the ranks wrote no results in {opts.timeout_s} s")
    ranks = []
    for part in parts:
        ranks.append(json.loads(part.read_text()))
        part.unlink()
    say(f"{scenario}: teardown {teardown}")
    return {**truth_doc(scenario, opts, ranks), "teardown": teardown}


def part_path(opts, rank: int, scenario: str) -> Path:
    """Where a worker leaves its half of the truth for the parent (written whole, then renamed)."""
    return opts.out / f".rank{rank}_{scenario}.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def truth_doc(scenario: str, opts, ranks: list[dict]) -> dict:
    from trace_recording import spread, versions

    late = opts.late_rank if scenario != "healthy" else None
    measured = None
    if scenario in ("host_late", "graph_host_late"):
        steps = ranks[opts.late_rank]["steps"]
        spins = [(s["host_delay_end_ns"] - s["start_ns"]) / 1e6 for s in steps]
        measured = {"host_spin_ms": spread(spins)}
    elif scenario == "gpu_late":
        warm = [s["extra_gemm_ms"] for s in ranks[opts.late_rank]["warmup_steps"]]
        measured = {
            "extra_gemms": ranks[opts.late_rank]["extra_gemms"],
            "chain_ms_in_warmup_steps": spread(warm),
            "note": "CUDA events around the chain in the unprofiled warm-up steps (the other rank "
            "sharing the GPU); the profiled steps run the same chain without events",
        }
    starts = [[s["start_ns"] for s in r["steps"]] for r in ranks]
    if late is not None and "host_delay_end_ns" in ranks[late]["steps"][0]:
        ready = [s["host_delay_end_ns"] for s in ranks[late]["steps"]]
        measured["late_rank_ready_after_other_start_ms"] = spread(
            [
                (r - min(s)) / 1e6
                for r, *s in zip(
                    ready, *(starts[i] for i in range(len(ranks)) if i != late), strict=True
                )
            ]
        )
    return {
        "what": f"{opts.world} "
        + ("NCCL ranks on one GPU" if opts.device == "cuda" else "gloo ranks on the CPU")
        + f", scenario {scenario}",
        "world": opts.world,
        "backend": "nccl" if opts.device == "cuda" else "gloo",
        "scenario": scenario,
        "late_rank": late,
        "delay": {
            "kind": {
                "host_late": "host busy loop" if opts.delay_kind == "spin" else "time.sleep",
                "graph_host_late": "host busy loop" if opts.delay_kind == "spin" else "time.sleep",
                "gpu_late": "own extra GEMMs",
            }.get(scenario),
            "chosen_ms": {
                "host_late": opts.delay_ms,
                "graph_host_late": opts.delay_ms,
                "gpu_late": opts.gpu_delay_ms,
            }.get(scenario),
            "measured": measured,
        },
        "steps": opts.steps,
        "warmup_steps": opts.warmup,
        "layers": opts.layers,
        "graph_replayed": scenario == "graph_host_late",
        "job": opts.job,
        "step_marks": opts.step_marks,
        "collective": ddp_buckets(opts)
        if opts.job == "ddp"
        else {
            "op": "all_reduce (sum)",
            "elements": opts.batch * opts.hidden,
            "dtype": "bfloat16" if opts.device == "cuda" else "float32",
            "bytes": opts.batch * opts.hidden * (2 if opts.device == "cuda" else 4),
            "per_layer": 2,
            "per_step": 2 * opts.layers,
            "in_trace_per_rank": opts.steps * 2 * opts.layers,
        },
        "step_start_skew_ms": spread(  # rank 1 minus rank 0, before any delay
            [(b - a) / 1e6 for a, b in zip(starts[0], starts[1], strict=True)]
        ),
        "step_start_skew_ms_by_rank": {  # each rank minus rank 0, before any delay
            str(r): spread([(b - a) / 1e6 for a, b in zip(starts[0], starts[r], strict=True)])
            for r in range(1, len(ranks))
        },
        "ranks": ranks,
        "clock": "start_ns etc.: time.time_ns() on the host (one clock for both ranks); "
        "start_trace_us = (ns - that rank's baseTimeNanoseconds) / 1000",
        "versions": versions(),
        "recorded_by": "examples/record_rank_traces.py " + " ".join(sys.argv[1:]),
    }


def ddp_buckets(opts) -> dict:
    """What the DDP job all-reduces: its gradients, 2 x (hidden^2 + hidden) float32 elements, in
    DDP's buckets (25 MiB by default; how many calls per step is read from the trace, not assumed)."""
    elements = 2 * (opts.hidden * opts.hidden + opts.hidden)
    return {
        "op": "all_reduce (sum) of the gradients, DDP's buckets",
        "elements_per_step": elements,
        "dtype": "float32",
        "bytes_per_step": elements * 4,
    }


def main(argv=None) -> int:
    opts = parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trace_recording import say, write_json

    os.environ["NCCL_NVLS_ENABLE"] = "0"
    opts.out.mkdir(parents=True, exist_ok=True)
    failures = []
    for scenario in opts.only:
        try:
            doc = run_scenario(scenario, opts)
        except Exception as exc:  # one scenario failing must not lose the others
            failures.append(f"{scenario}: {type(exc).__name__}: {exc}"[:600])
            say(f"FAILED {failures[-1]}")
            continue
        write_json(opts.out / f"{opts.prefix}_{scenario}.truth.json", doc)
        skew = doc["step_start_skew_ms"]["median"]
        print(f"scenario={scenario} late_rank={doc['late_rank']} start_skew_ms={skew:.3f}")
    write_json(opts.out / f"{opts.prefix}_summary.json", {"failures": failures})
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
