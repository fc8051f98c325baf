"""The next commands diagnose suggests, built from the evidence's own configuration so they can be
pasted as they are, and phrased for the engine that produced the evidence (ncclprobe's engine,
SGLang, vLLM, or any PyTorch program)."""

from __future__ import annotations

import shlex
from pathlib import Path

from ncclprobe.nccl.recipes import USER_LOG_NAME, user_log_env
from ncclprobe.sizes import format_size

# How to record a profile that diagnose reads, per engine (`diagnose --profile FILE`). SGLang
# writes one trace per TP rank into SGLANG_TORCH_PROFILER_DIR; vLLM into its profiler directory.
PROFILE_COMMANDS = {
    "sglang": (
        "SGLANG_TORCH_PROFILER_DIR=/tmp/sglang-profile python -m sglang.launch_server ...  # then: "
        "curl -X POST http://localhost:30000/start_profile -H 'Content-Type: application/json' "
        '-d \'{"num_steps": 20, "activities": ["CPU", "GPU"], "record_shapes": true}\'  '
        "# send requests; then: ncclprobe diagnose --profile /tmp/sglang-profile/*.trace.json.gz"
    ),
    "vllm": (
        'vllm serve MODEL --profiler-config \'{"profiler": "torch", "torch_profiler_dir": "/tmp/vllm-profile", '
        '"torch_profiler_record_shapes": true}\'  # then: curl -X POST http://localhost:8000/start_profile; '
        "send requests; curl -X POST http://localhost:8000/stop_profile; "
        "ncclprobe diagnose --profile /tmp/vllm-profile/*.pt.trace.json.gz  "
        "# vLLM before 0.13 has no --profiler-config: VLLM_TORCH_PROFILER_DIR=/tmp/vllm-profile vllm serve MODEL"
    ),
}


def fresh(name: str) -> str:
    """`name`, or `name` numbered (trace-2.json, ...) when a file of that name exists here: every
    suggested command must run as printed, and ncclprobe never overwrites an output."""
    path = Path(name)
    n = 2
    while path.exists():
        path = Path(f"{Path(name).stem}-{n}{Path(name).suffix}")
        n += 1
    return str(path)


def engine_command(
    config: dict, trace_out: str = "trace.json", *, train_missing_draft: bool = True, **changes
) -> str:
    """`ncclprobe run-engine` with the trace's configuration, `changes` applied (None drops a flag).
    A draft the trace used that is not here is trained first (`train-draft ... &&`), so the
    command runs as printed."""
    flags = {
        "preset": config.get("preset"),
        "checkpoint": config.get("checkpoint"),
        "tp": config.get("tp"),
        "batch": config.get("batch"),
        "k": config.get("k"),
        "new_tokens": config.get("new_tokens"),
        "draft": config.get("draft"),
        "graphs": config.get("graphs"),
        "repeats": config.get("repeats") if (config.get("repeats") or 1) > 1 else None,
    }
    if flags["checkpoint"]:
        flags["preset"] = None
    flags.update(changes)
    parts = ["ncclprobe", "run-engine"]
    for name, value in flags.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        parts += [flag] if value is True else [flag, str(value)]
    command = shlex.join(parts + ["--trace", fresh(trace_out)])
    draft = flags.get("draft")
    if draft and train_missing_draft and not Path(draft).exists():
        return f"{draft_command(config, str(draft))} && {command}"
    return command


def draft_command(config: dict, out: str, *extra: str) -> str:
    """`ncclprobe train-draft` for the trace's target (its preset or checkpoint, and seed)."""
    target = (
        ["--checkpoint", config["checkpoint"]]
        if config.get("checkpoint")
        else ["--preset", config.get("preset") or "tiny"]
    )
    seed = ["--seed", str(config["seed"])] if config.get("seed") else []
    return shlex.join(["ncclprobe", "train-draft", *target, *seed, *extra, "--output", out])


def sweep_command(nranks, sizes: str, *extra: str) -> str:
    """`ncclprobe sweep` of the engine's collective sizes at its rank count, into a new results file."""
    return shlex.join(
        [
            "ncclprobe",
            "sweep",
            "--nranks",
            str(nranks or 2),
            "--sizes",
            sizes,
            *extra,
            "--output",
            fresh("sweep.jsonl"),
        ]
    )


def graphs_command(ev, phase: str) -> str:
    """What captures `phase` in a CUDA graph, for the engine the evidence came from."""
    engine = ev.config.get("engine") or "ncclprobe"
    if ev.kind == "engine-trace" or engine == "ncclprobe":
        return engine_command(ev.config, graphs="all", trace_out="trace-graphs-all.json")
    if engine == "sglang":
        return (
            f"SGLang: keep CUDA graphs on for the {phase} step (no --disable-cuda-graph; --cuda-graph-max-bs "
            "at least the running batch size), then profile again: " + PROFILE_COMMANDS["sglang"]
        )
    if engine == "vllm":
        return (
            'vLLM: --compilation-config \'{"cudagraph_mode": "FULL_AND_PIECEWISE"}\' and check the server log for '
            "'setting cudagraph_mode=PIECEWISE' (the attention backend may refuse full graphs with spec-decode); "
            "then profile again: " + PROFILE_COMMANDS["vllm"]
        )
    return (
        f"capture the {phase} step in a CUDA graph (torch.cuda.CUDAGraph, or torch.compile(mode='reduce-overhead')) "
        "and profile again"
    )


def profile_command(engine: str | None) -> str:
    return PROFILE_COMMANDS.get(
        engine or "",
        "record torch.profiler traces (one per rank, with record_shapes=True) "
        "and run: ncclprobe diagnose --profile FILE",
    )


def sizes_arg(sizes: list[int]) -> str:
    return ",".join(format_size(s) for s in sorted(set(sizes)))


# What makes a hung job leave the evidence `diagnose --flight-recorder/--log` reads: every rank's
# Flight Recorder dumped on the watchdog's timeout into one folder. Both spellings of each variable:
# torch 2.13 reads TORCH_FR_*, older releases TORCH_NCCL_TRACE_BUFFER_SIZE and
# TORCH_NCCL_DEBUG_INFO_TEMP_FILE (2.13 still reads those, with a deprecation warning).
FLIGHT_RECORDER_ENV = (
    "TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
    "TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/nccl_trace_rank_ TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/tmp/fr/nccl_trace_rank_"
)


def flight_recorder_command(nccl_logs: bool = False) -> str:
    """Run the job again so that a hang leaves every rank's dump (and, asked, NCCL's logs) behind."""
    nccl_env = " ".join(f"{k}={v}" for k, v in user_log_env("/tmp/fr").items())
    env = FLIGHT_RECORDER_ENV + (f" {nccl_env}" if nccl_logs else "")
    glob = USER_LOG_NAME.replace("%h.%p", "*")
    logs = f" --nccl-log /tmp/fr/{glob}" if nccl_logs else ""
    return (
        f"mkdir -p /tmp/fr && {env} torchrun ... 2>&1 | tee job.log  # then: "
        f"ncclprobe diagnose --flight-recorder /tmp/fr --log job.log{logs}"
    )
