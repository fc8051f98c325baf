"""The graph-capture probe, parent side: check that it can run, start the workers, and turn
their messages into one document with verdicts. The measurements are in `graph_capture`."""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass

from ncclprobe import tempdirs
from ncclprobe.errors import Unsupported, UsageProblem
from ncclprobe.launch import PoolSpec, PoolStatus, run_pool
from ncclprobe.nccl.knob_row import Scope
from ncclprobe.nccl.knobs import proof_scope
from ncclprobe.nccl.recipes import (
    NO_NVLS,
    NOT_WITH_SHARED_GPU,
    SHARE_GPU_RANK_ENV,
    check_share_gpu_ranks,
    proof_env,
    rank_log_env,
)
from ncclprobe.nccl.values import validate_value
from ncclprobe.probes.graph_capture_verdict import capture_verdict
from ncclprobe.verdict import Verdict

SCHEMA_VERSION = 1
ENTRY = "ncclprobe.probes.graph_capture:run"
SHARE_GPU_NOTE = (
    "diagnostic mode --share-gpu {n}: {n} ranks on GPU 0, each with its own NCCL_HOSTID so NCCL "
    "takes them for separate hosts and connects them over NET/Socket; the timings say nothing "
    "about NVLink or PCIe, but which setting each communicator and each captured graph uses is real"
)


@dataclass(frozen=True, kw_only=True)
class GraphCaptureSpec:
    sizes: tuple[int, ...]  # all-reduce sizes to time, bytes (float32 buffers)
    nranks: int = 1  # one GPU per rank
    share_gpu: int = 0  # >= 2: that many ranks on GPU 0 (diagnostic: NET/Socket); 0: off
    iters: int = 200  # eager calls per timing
    graph_ops: int = 20  # collectives captured in one graph
    replays: int = 50  # graph replays per timing
    variable: str = "NCCL_PROTO"  # the per-communicator setting switched between communicators
    first: str = "LL"  # its value when the first graph is captured
    second: str = "Simple"  # its value for the second communicator
    capture_size: int = 1 << 20  # bytes of the captured all-reduce in the settings part
    raw_nccl: bool = True  # also time a raw NCCL communicator through cupy
    timeout_s: float = 300.0

    def __post_init__(self):
        if not self.sizes or min(self.sizes) < 4:
            raise UsageProblem(
                f"sizes must be at least 4 bytes (one float32), got {list(self.sizes)}"
            )
        if self.nranks < 1 or self.iters < 1 or self.graph_ops < 1 or self.replays < 1:
            raise UsageProblem("nranks, iters, graph-ops and replays must all be at least 1")
        if self.share_gpu:
            self._check_share_gpu()
        if proof_scope(self.variable) is not Scope.COMMUNICATOR:
            raise UsageProblem(
                f"{self.variable} is read (or logged) once per process, so NCCL's log cannot show a "
                "new communicator in the same process taking another value; use a per-communicator "
                "variable such as NCCL_PROTO or NCCL_ALGO"
            )
        validate_value(self.variable, self.first)
        validate_value(self.variable, self.second)
        if self.first.lower() == self.second.lower():
            raise UsageProblem(
                f"the two values of {self.variable} must differ, got {self.first!r} twice"
            )

    def _check_share_gpu(self) -> None:
        check_share_gpu_ranks(self.share_gpu)
        if self.nranks != 1:
            raise UsageProblem(
                f"--share-gpu {self.share_gpu} sets the number of ranks (all on GPU 0); "
                f"drop --nranks {self.nranks}"
            )
        if self.variable in NOT_WITH_SHARED_GPU:
            raise UsageProblem(
                f"--share-gpu: {self.variable} cannot be the --variable: "
                f"{NOT_WITH_SHARED_GPU[self.variable]}"
            )

    @property
    def world_size(self) -> int:
        return self.share_gpu or self.nranks


def check_available(spec: GraphCaptureSpec) -> None:
    """Raise Unsupported (exit 3) with the reason when this machine cannot run the probe."""
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        mode = (
            f" (--share-gpu {spec.share_gpu} too: its ranks share one CUDA GPU)"
            if spec.share_gpu
            else ""
        )
        raise Unsupported(
            f"graph-capture needs a CUDA GPU with NCCL{mode}: torch.cuda.is_available() is False "
            "on this machine"
        )
    if not dist.is_nccl_available():
        raise Unsupported(
            "graph-capture needs torch built with NCCL: torch.distributed.is_nccl_available() is False"
        )
    if not spec.share_gpu and torch.cuda.device_count() < spec.nranks:
        raise Unsupported(
            f"--nranks {spec.nranks} needs {spec.nranks} GPUs (one per rank; NCCL refuses two ranks "
            f"on one GPU, see --share-gpu); this machine has {torch.cuda.device_count()}"
        )


def pool_spec(spec: GraphCaptureSpec, log_dir: str) -> PoolSpec:
    """The workers' pool: NCCL logs what it reads and plans into one file per rank; NVLS stays
    off (a multicast setup is not what this probe measures); under --share-gpu every rank runs on
    GPU 0 with its own NCCL_HOSTID, without which NCCL refuses a second rank on the same GPU."""
    env = {**proof_env(), **NO_NVLS}
    payload = {
        k: v for k, v in asdict(spec).items() if k not in ("nranks", "share_gpu", "timeout_s")
    }
    payload["sizes"] = list(spec.sizes)
    rank_env = {**rank_log_env(log_dir), **(SHARE_GPU_RANK_ENV if spec.share_gpu else {})}
    return PoolSpec(
        nranks=spec.world_size,
        backend="nccl",
        entry=ENTRY,
        payload=payload,
        env=env,
        unset=(spec.variable,),
        rank_env=rank_env,
        timeout_s=spec.timeout_s,
        gpu=0 if spec.share_gpu else None,
    )


def run_graph_capture(spec: GraphCaptureSpec, on_message=None) -> dict:
    check_available(spec)
    log_dir = str(tempdirs.make("ncclprobe-graph-capture-"))
    try:
        outcome = run_pool(pool_spec(spec, log_dir), on_message=on_message)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    if outcome.status is not PoolStatus.OK:
        raise Unsupported(f"graph-capture probe {outcome.status}: {outcome.reason}")
    return build_document(spec, outcome.messages)


def build_document(spec: GraphCaptureSpec, messages: list[dict]) -> dict:
    rows = timing_rows([m for m in messages if m.get("kind") == "timing"])
    capture = next((m for m in messages if m.get("kind") == "capture" and m.get("rank") == 0), None)
    unavailable = next(
        (m["reason"] for m in messages if m.get("kind") == "raw-nccl-unavailable"), None
    )
    notes = [SHARE_GPU_NOTE.format(n=spec.share_gpu)] if spec.share_gpu else []
    if unavailable:
        notes.append(f"raw NCCL path (cupy) not measured: {unavailable}")
    if spec.world_size == 1:
        notes.append(
            "one rank: NCCL runs a one-rank all-reduce in place as a no-op, without choosing an algorithm, "
            "so eager time is the host path alone"
        )
    verdict = None
    if capture:
        verdict = capture_verdict(
            spec.variable, spec.first, spec.second, spec.world_size, capture["steps"]
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "graph-capture",
        "nranks": spec.world_size,
        "share_gpu": spec.share_gpu,
        "spec": {**asdict(spec), "sizes": list(spec.sizes)},
        "timings": rows,
        "capture": verdict,
        "notes": notes,
    }


def verdict(doc: dict) -> Verdict:
    """FINDINGS when NCCL's log shows a replayed graph did not keep the setting it was captured
    with; FINE otherwise (one rank: nothing about settings can be shown, nothing is claimed)."""
    return Verdict.of((doc.get("capture") or {}).get("replay_kept_capture") is False)


def timing_rows(timings: list[dict]) -> list[dict]:
    """One row per (path, size): the slowest rank's times (a collective ends with its last rank)."""
    keys = sorted(
        {(t["path"], t["size_bytes"]) for t in timings},
        key=lambda k: (k[0] != "torch.distributed", k),
    )
    rows = []
    for path, size in keys:
        mine = [t for t in timings if (t["path"], t["size_bytes"]) == (path, size)]
        row = {"path": path, "size_bytes": size}
        for field in (
            "eager_loop_us",
            "eager_host_us",
            "eager_device_us",
            "graph_us_per_op",
            "graph_launch_host_us",
        ):
            row[field] = round(max(t[field] for t in mine), 3)
        row["graph_saves_us_per_call"] = round(row["eager_loop_us"] - row["graph_us_per_op"], 3)
        row["queued_ahead"] = all(t["queued_ahead"] for t in mine)
        rows.append(row)
    return rows
