"""The graph-capture probe, parent side: check that it can run, start the workers, and turn
their messages into one document with verdicts. The measurements are in `graph_capture`."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict, dataclass

from ncclprobe.errors import Unsupported, UsageProblem
from ncclprobe.knobs import Scope, scope_of, validate_value

SCHEMA_VERSION = 1
ENTRY = "ncclprobe.probes.graph_capture:run"


@dataclass(frozen=True, kw_only=True)
class GraphCaptureSpec:
    sizes: tuple[int, ...]            # all-reduce sizes to time, bytes (float32 buffers)
    nranks: int = 1                   # one GPU per rank
    iters: int = 200                  # eager calls per timing
    graph_ops: int = 20               # collectives captured in one graph
    replays: int = 50                 # graph replays per timing
    variable: str = "NCCL_PROTO"      # the per-communicator setting switched between communicators
    first: str = "LL"                 # its value when the first graph is captured
    second: str = "Simple"            # its value for the second communicator
    capture_size: int = 1 << 20       # bytes of the captured all-reduce in the settings part
    raw_nccl: bool = True             # also time a raw NCCL communicator through cupy
    timeout_s: float = 300.0

    def __post_init__(self):
        if not self.sizes or min(self.sizes) < 4:
            raise UsageProblem(f"sizes must be at least 4 bytes (one float32), got {list(self.sizes)}")
        if self.nranks < 1 or self.iters < 1 or self.graph_ops < 1 or self.replays < 1:
            raise UsageProblem("nranks, iters, graph-ops and replays must all be at least 1")
        if scope_of(self.variable) is not Scope.COMMUNICATOR:
            raise UsageProblem(f"{self.variable} is read once per process, so a new communicator in the same "
                               "process cannot change it; use a per-communicator variable such as NCCL_PROTO or NCCL_ALGO")
        validate_value(self.variable, self.first)
        validate_value(self.variable, self.second)
        if self.first.lower() == self.second.lower():
            raise UsageProblem(f"the two values of {self.variable} must differ, got {self.first!r} twice")


def check_available(nranks: int) -> None:
    """Raise Unsupported (exit 3) with the reason when this machine cannot run the probe."""
    import torch
    import torch.distributed as dist
    if not torch.cuda.is_available():
        raise Unsupported("graph-capture needs a CUDA GPU with NCCL: torch.cuda.is_available() is False on this machine")
    if not dist.is_nccl_available():
        raise Unsupported("graph-capture needs torch built with NCCL: torch.distributed.is_nccl_available() is False")
    if torch.cuda.device_count() < nranks:
        raise Unsupported(f"--nranks {nranks} needs {nranks} GPUs (one per rank; NCCL refuses two ranks on one GPU); "
                          f"this machine has {torch.cuda.device_count()}")


def run_graph_capture(spec: GraphCaptureSpec, on_message=None) -> dict:
    check_available(spec.nranks)
    from ncclprobe.launch import PoolSpec, run_pool
    log_dir = tempfile.mkdtemp(prefix="ncclprobe-graph-capture-")
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING",
           "NCCL_DEBUG_FILE": f"{log_dir}/nccl.%h.%p.log", "NCCLPROBE_NCCL_LOG_DIR": log_dir}
    payload = {k: v for k, v in asdict(spec).items() if k not in ("nranks", "timeout_s")}
    payload["sizes"] = list(spec.sizes)
    try:
        outcome = run_pool(PoolSpec(nranks=spec.nranks, backend="nccl", entry=ENTRY, payload=payload, env=env,
                                    unset=(spec.variable,), timeout_s=spec.timeout_s), on_message=on_message)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    if outcome.status != "ok":
        raise Unsupported(f"graph-capture probe {outcome.status}: {outcome.reason}")
    return build_document(spec, outcome.messages)


def build_document(spec: GraphCaptureSpec, messages: list[dict]) -> dict:
    rows = timing_rows([m for m in messages if m.get("kind") == "timing"])
    capture = next((m for m in messages if m.get("kind") == "capture" and m.get("rank") == 0), None)
    unavailable = next((m["reason"] for m in messages if m.get("kind") == "raw-nccl-unavailable"), None)
    notes = []
    if unavailable:
        notes.append(f"raw NCCL path (cupy) not measured: {unavailable}")
    if spec.nranks == 1:
        notes.append("one rank: NCCL runs a one-rank all-reduce in place as a no-op, without choosing an algorithm, "
                     "so eager time is the host path alone and TUNING lines need two or more GPUs")
    return {"schema_version": SCHEMA_VERSION, "kind": "graph-capture", "nranks": spec.nranks,
            "spec": {**asdict(spec), "sizes": list(spec.sizes)}, "timings": rows,
            "capture": capture_verdict(spec, capture) if capture else None, "notes": notes}


def timing_rows(timings: list[dict]) -> list[dict]:
    """One row per (path, size): the slowest rank's times (a collective ends with its last rank)."""
    keys = sorted({(t["path"], t["size_bytes"]) for t in timings}, key=lambda k: (k[0] != "torch.distributed", k))
    rows = []
    for path, size in keys:
        mine = [t for t in timings if (t["path"], t["size_bytes"]) == (path, size)]
        row = {"path": path, "size_bytes": size}
        for field in ("eager_loop_us", "eager_host_us", "eager_device_us", "graph_us_per_op", "graph_launch_host_us"):
            row[field] = round(max(t[field] for t in mine), 3)
        row["graph_saves_us_per_call"] = round(row["eager_loop_us"] - row["graph_us_per_op"], 3)
        row["queued_ahead"] = all(t["queued_ahead"] for t in mine)
        rows.append(row)
    return rows


def capture_verdict(spec: GraphCaptureSpec, msg: dict) -> dict:
    """What the log and the timings show about settings baked in at capture."""
    steps = msg["steps"]
    first_log, second_log = steps["first_comm_capture"]["log"], steps["second_comm_capture"]["log"]
    replay_log = steps["first_graph_replayed_after_switch"]["log"]
    eager_log = steps["first_comm_eager_after_switch"]["log"]
    before = steps["first_comm_capture"]["graph_us_per_op"]
    after = steps["first_graph_replayed_after_switch"]["graph_us_per_op"]
    verdict = {
        "variable": spec.variable, "first": spec.first, "second": spec.second, "steps": steps,
        "first_comm_read": _read(first_log, spec.variable), "second_comm_read": _read(second_log, spec.variable),
        "protos_at_first_capture": _protos(first_log), "protos_at_second_capture": _protos(second_log),
        "tuning_lines_at_replay": len((replay_log or {}).get("tuning") or []),
        "protos_first_comm_after_switch": _protos(eager_log),
        "replay_us_per_op_before_switch": before, "replay_us_per_op_after_switch": after,
        "second_graph_us_per_op": steps["second_comm_capture"]["graph_us_per_op"],
    }
    verdict["each_comm_read_its_value"] = (_same(verdict["first_comm_read"], spec.first)
                                           and _same(verdict["second_comm_read"], spec.second))
    # one rank: NCCL plans nothing, so there is no per-collective setting to keep
    verdict["replay_kept_capture"] = None if spec.nranks == 1 else (
        verdict["tuning_lines_at_replay"] == 0 and before > 0 and abs(after - before) <= 0.25 * before)
    return verdict


def _read(log: dict | None, variable: str) -> str | None:
    return (log or {}).get("env", {}).get(variable)


def _protos(log: dict | None) -> list[str]:
    return sorted({f"{t['algo']}/{t['proto']}" for t in (log or {}).get("tuning") or []})


def _same(read: str | None, value: str) -> bool:
    return read is not None and read.strip().lower() == value.lower()
