"""The next commands diagnose suggests, built from the evidence's own configuration so they can be
pasted as they are, and phrased for the engine that produced the evidence (ncclprobe's engine,
SGLang, vLLM, or any PyTorch program).

A next step is a shell snippet: one or more lines, each a command (printed whole at any width: a
wrapped command cannot be pasted) or a `# ` comment (prose, which the text output may wrap into
further `# ` lines). A command may end in `  # ` and a remark.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ncclprobe.nccl.recipes import USER_LOG_NAME, flight_recorder_env, user_log_env
from ncclprobe.sizes import exact_size

if TYPE_CHECKING:
    from ncclprobe.evidence.bundle import Evidence

# A collective of the engine is compared with the sweep's nearest measured size within this factor
# either way (sweep_match); a size without one is what the next sweep should measure.
NEAREST_FACTOR = 2.0

# How to record a profile that diagnose reads, per engine (`diagnose --profile DIR` reads every
# trace in the directory). SGLang writes one trace per TP rank into SGLANG_TORCH_PROFILER_DIR; vLLM
# into its profiler directory.
PROFILE_COMMANDS = {
    "sglang": "\n".join(
        (
            "# start the server as usual, with a profiler directory:",
            "SGLANG_TORCH_PROFILER_DIR=/tmp/sglang-profile python -m sglang.launch_server ...",
            "curl -X POST http://localhost:30000/start_profile -H 'Content-Type: application/json' "
            '-d \'{"num_steps": 20, "activities": ["CPU", "GPU"], "record_shapes": true}\'',
            "# send requests; after 20 steps the profile is written, then:",
            "ncclprobe diagnose --profile /tmp/sglang-profile",
        )
    ),
    "vllm": "\n".join(
        (
            "# start the server as usual, with the torch profiler (vLLM before 0.13 has no "
            "--profiler-config: VLLM_TORCH_PROFILER_DIR=/tmp/vllm-profile vllm serve MODEL):",
            'vllm serve MODEL --profiler-config \'{"profiler": "torch", "torch_profiler_dir": "/tmp/vllm-profile", '
            '"torch_profiler_record_shapes": true}\'',
            "curl -X POST http://localhost:8000/start_profile",
            "# send requests, then:",
            "curl -X POST http://localhost:8000/stop_profile",
            "ncclprobe diagnose --profile /tmp/vllm-profile",
        )
    ),
}

# train-draft sized to where the trace ran, and the time that took there (docs/LOG.md): its defaults
# (512 sequences x 1000 steps, the whole vocabulary) kept a 135M checkpoint busy for many minutes on
# the CPU machine without a useful result.
DRAFT_SIZES = {
    ("cpu", "preset"): ((), "train-draft takes about 40 s on a 2-core CPU"),
    ("cpu", "checkpoint"): (
        ("--sequences", "16", "--steps", "30", "--draft-vocab", "2048", "--gen-len", "24"),
        "train-draft sized for a CPU: about 5 min on a loaded 2-core CPU, for a small gain "
        "(acceptance 1.00 -> 1.11); a GPU trains a useful draft",
    ),
    ("cuda", "checkpoint"): (
        (),
        "train-draft of a 135M checkpoint takes about a minute on one H200 "
        "(examples/smollm_bench.py: 48 s); larger ones longer",
    ),
    ("cuda", "preset"): ((), "train-draft's time on a GPU for this preset is not recorded"),
}


def draft_note(config: dict) -> str:
    """What the suggested train-draft costs where the trace ran (a remark for the command line)."""
    return _draft_size(config)[1]


def _draft_size(config: dict) -> tuple[tuple[str, ...], str]:
    device = "cuda" if config.get("device") == "cuda" else "cpu"
    return DRAFT_SIZES[(device, "checkpoint" if config.get("checkpoint") else "preset")]


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
    config: dict,
    trace_out: str = "trace.json",
    *,
    train_missing_draft: bool = True,
    **changes: object,
) -> str:
    """`ncclprobe run-engine` with the trace's configuration, `changes` applied (None drops a flag).
    A draft the trace used that is not here is trained first (`train-draft ... &&`), so the
    command runs as printed."""
    from ncclprobe.engine.checkpoints import short_name

    flags = {
        "preset": config.get("preset"),
        "checkpoint": short_name(config.get("checkpoint")),
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
    parts += list(config.get("prompt_options") or [])  # the run's own --chat, --prompt, ...
    command = shlex.join(parts + ["--trace", fresh(trace_out)])
    draft = flags.get("draft")
    if draft and train_missing_draft and not Path(draft).exists():
        return f"{draft_command(config, str(draft))} && {command}  # {draft_note(config)}"
    return command


def draft_command(config: dict, out: str, *extra: str) -> str:
    """`ncclprobe train-draft` for the trace's target (its preset or checkpoint, seed and --chat),
    sized to the trace's device (DRAFT_SIZES); `extra` options override the sizing's."""
    from ncclprobe.engine.checkpoints import short_name

    target = (
        ["--checkpoint", short_name(config["checkpoint"])]
        if config.get("checkpoint")
        else ["--preset", config.get("preset") or "tiny"]
    )
    seed = ["--seed", str(config["seed"])] if config.get("seed") else []
    chat = ["--chat"] if config.get("chat") else []
    options = dict(zip(*[iter(_draft_size(config)[0])] * 2))
    options.update(zip(*[iter(extra)] * 2))
    sized = [word for pair in options.items() for word in pair]
    return shlex.join(["ncclprobe", "train-draft", *target, *seed, *chat, *sized, "--output", out])


def sweep_command(nranks: int | None, sizes: str, *extra: str) -> str:
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


ONE_HOST_RANKS = 8  # the most ranks a printed sweep starts on one host: a node's GPUs at most


def sweep_next(ev: Evidence, sizes: list[int], *extra: str) -> str:
    """The sweep that measures the engine's collective sizes at its rank count, or "" when the
    given --sweep already holds every one (within the factor diagnose matches sizes by): a step the
    evidence already took is not suggested again. On gloo one configuration (the defaults): NCCL
    settings do not act there, so the 12-configuration NCCL grid would measure noise 12 times;
    what the machine can answer is what gloo's collectives of these sizes cost."""
    nranks = ev.config.get("tp")
    measured = [
        r.size_bytes
        for r in ev.sweep
        if r.size_bytes and (nranks is None or r.nranks in (None, nranks))
    ]
    missing = [
        s
        for s in sizes
        if not any(abs(math.log(m / s)) <= math.log(NEAREST_FACTOR) for m in measured)
    ]
    if sizes and not missing:
        return ""
    if gloo(ev):  # the job's own backend: on a GPU machine the sweep would otherwise run NCCL
        extra = ("--backend", "gloo", "--proto", "default", "--algo", "default", *extra)
    local = _local_ranks(ev)
    command = sweep_command(
        min(nranks, local) if nranks else nranks, sizes_arg(missing) if sizes else "8K..1M", *extra
    )
    if nranks and nranks > local:
        return (
            f"# the job ran {nranks} ranks; this sweep runs {local} on this one host "
            "(ncclprobe sweep --launcher srun|torchrun|mpirun --hosts ... runs it across the job's "
            f"nodes):\n{command}"
        )
    return command


def _local_ranks(ev: Evidence) -> int:
    """The ranks a sweep printed here starts on one host: the job's own ranks on it where a capture
    saw them, else at most ONE_HOST_RANKS (a node's GPUs)."""
    seen = {p.rank for p in ev.capture.processes if p.rank is not None} if ev.capture else set()
    return len(seen) or ONE_HOST_RANKS


def gloo(ev: Evidence) -> bool:
    """A run on gloo (an engine trace on the CPU machine, a profile whose header or host ops say
    gloo): NCCL settings do not act on its runs."""
    return bool(ev.config.get("backend") == "gloo")


def graphs_command(ev: Evidence, phase: str) -> str:
    """What captures `phase` in a CUDA graph, for the engine the evidence came from."""
    engine = ev.config.get("engine") or "ncclprobe"
    if ev.kind == "engine-trace" or engine == "ncclprobe":
        return engine_command(ev.config, graphs="all", trace_out="trace-graphs-all.json")
    if engine == "sglang":
        return (
            f"# SGLang: keep CUDA graphs on for the {phase} step (no --disable-cuda-graph; "
            "--cuda-graph-max-bs at least the running batch size), then profile again:\n"
            + PROFILE_COMMANDS["sglang"]
        )
    if engine == "vllm":
        return (
            '# vLLM: serve with --compilation-config \'{"cudagraph_mode": "FULL_AND_PIECEWISE"}\' and '
            "check the server log for 'setting cudagraph_mode=PIECEWISE' (the attention backend may "
            "refuse full graphs with spec-decode); then profile again:\n" + PROFILE_COMMANDS["vllm"]
        )
    return (
        f"# capture the {phase} step in a CUDA graph (torch.cuda.CUDAGraph, or "
        "torch.compile(mode='reduce-overhead')) and profile again"
    )


def profile_command(engine: str | None, *, with_stack: bool = False) -> str:
    """How to record the profile a rule needs; `with_stack`: the Python stacks (the host call
    behind an idle GPU), not only the shapes."""
    if engine in PROFILE_COMMANDS:
        text = PROFILE_COMMANDS[engine]
        if with_stack and engine == "sglang":
            return text.replace(
                '"record_shapes": true}', '"record_shapes": true, "with_stack": true}'
            )
        if with_stack and engine == "vllm":
            return text.replace(
                '"torch_profiler_record_shapes": true}',
                '"torch_profiler_record_shapes": true, "torch_profiler_with_stack": true}',
            )
        return text
    what = "with_stack=True" if with_stack else "record_shapes=True"
    return (
        f"# record torch.profiler traces (one per rank, with {what}) into /tmp/profile, "
        "then:\nncclprobe diagnose --profile /tmp/profile"
    )


def sizes_arg(sizes: list[int]) -> str:
    """Sizes as `sweep --sizes` reads them back to the byte (2304,9K,85248; never 2.25K)."""
    return ",".join(exact_size(int(s)) for s in sorted(set(sizes)))


# What makes a hung job leave the evidence `diagnose --flight-recorder/--log` reads: every rank's
# Flight Recorder dumped on the watchdog's timeout into one folder (`nccl.recipes.flight_recorder_env`).
FLIGHT_RECORDER_ENV = " ".join(
    f"{k}={v}" for k, v in flight_recorder_env("/tmp/fr/nccl_trace_rank_").items()
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
