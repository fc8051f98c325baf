"""Profile scenarios for the diagnose tests: real traces (tests/fixtures/profiles/, INDEX.md there
names each source), and edits of them for what the CPU machine cannot record.

Each edit says what it changes and why. None pretends to be a recording: the seed case on a GPU
(a speculative verify launched kernel by kernel beside a captured decode) is recorded by
examples/record_profiles.py on the H200; until those traces are committed, this is built from the
real vLLM graph-replay trace.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

PROFILES = Path(__file__).resolve().parent / "fixtures" / "profiles"
LOGS = Path(__file__).resolve().parent / "fixtures" / "server_logs"
VLLM = PROFILES / "vllm_decode_full_cudagraph_bs32_mi300x_tracelens.json.gz"
SGLANG = PROFILES / "sglang_qwen3-8b_decode_bs32_mi300x_tracelens.json.gz"
DDP = PROFILES / "ddp_training_2rank_nccl_metadata_hta.json.gz"
H200_NCCL = PROFILES / "nccl_2.28.9_h200_2ranks_1gpu_hostid_allreduce_eager_then_graph.json.gz"


def load(path: Path) -> dict:
    return json.load(gzip.open(path))


def write(doc: dict, path: Path, gz: bool = True) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def unrolled_verify(doc: dict, tokens_per_seq: int = 4, launch_us: float = 40.0) -> dict:
    """The vLLM decode step as the seed case's eager verify: every kernel its `hipGraphLaunch`
    replayed gets its own `hipLaunchKernel` call, `launch_us` apart on the host thread (chosen so the
    host, not the GPU, sets the pace, as in an eager step of a small model), and starts
    on the GPU no earlier than its launch plus 5 µs (a GPU fed kernel by kernel waits for the host);
    the annotation's query tokens become `tokens_per_seq` per sequence (a k+1 verify). Kernel
    durations are kept: an eager step runs the same kernels, only launched one by one."""
    t = copy.deepcopy(doc)
    events = t["traceEvents"]
    graph = next(
        e for e in events if e.get("cat") == "cuda_runtime" and e["name"] == "hipGraphLaunch"
    )
    gcorr, host_tid, host_pid = graph["args"]["correlation"], graph["tid"], graph["pid"]
    kernels = sorted(
        (e for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") == gcorr),
        key=lambda e: e["ts"],
    )
    next_corr = 10_000_000
    host_ts = gpu_free = graph["ts"]  # the GPU waits for the step: it starts when the launches do
    launches = []
    for kernel in kernels:
        next_corr += 1
        launches.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "hipLaunchKernel",
                "pid": host_pid,
                "tid": host_tid,
                "ts": host_ts,
                "dur": 4.0,
                "args": {"correlation": next_corr},
            }
        )
        kernel["args"]["correlation"] = next_corr
        kernel["ts"] = max(gpu_free, host_ts + 5.0)
        gpu_free = kernel["ts"] + kernel["dur"]
        host_ts += launch_us
    events.remove(graph)
    events.extend(launches)
    for e in events:
        if e.get("cat") == "user_annotation" and e["name"].startswith("execute_"):
            e["name"] = e["name"].replace(
                "generation_32(sq32", f"generation_32(sq{32 * tokens_per_seq}"
            )
            e["dur"] = host_ts - e["ts"] + 50.0
    return t


def torch18_categories(doc: dict) -> dict:
    """The same trace with the category names torch 1.8's Kineto wrote (`Kernel`, `Runtime`,
    `Memcpy`, `Memset`, `Operator`) and `ProfilerStep#N` as an operator, as torch 1.x recorded it
    (the TensorBoard profiler plugin reads both spellings). Nothing else changes."""
    old = {
        "kernel": "Kernel",
        "cuda_runtime": "Runtime",
        "cuda_driver": "Runtime",
        "gpu_memcpy": "Memcpy",
        "gpu_memset": "Memset",
        "cpu_op": "Operator",
    }
    t = copy.deepcopy(doc)
    for e in t["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation":
            e["cat"] = "Operator"
        elif e.get("cat") in old:
            e["cat"] = old[e["cat"]]
    return t
