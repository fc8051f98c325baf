"""The parent side of `run-engine`: start the TP workers, collect their reports, build the trace.

One pool per `RunSpec` (a pool's environment is fixed at exec, so untuned and tuned settings need
separate pools). The result is the engine-trace document of docs/DESIGN.md ("Engine trace"):
the run records are assembled here, with the schema of `ncclprobe.evidence.run.trace` (the
trace's owner: schema, loader), and `trace_checks.finish` links and checks them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ncclprobe import tempdirs
from ncclprobe.engine.prompts import add_text
from ncclprobe.engine.spec import RunSpec
from ncclprobe.errors import NcclprobeError, UsageProblem
from ncclprobe.evidence.run import trace, trace_checks
from ncclprobe.evidence.run.modes import GraphMode, Mode
from ncclprobe.launch import PoolSpec, PoolStatus, run_pool
from ncclprobe.nccl.recipes import proof_env, rank_log_env
from ncclprobe.provenance import collect
from ncclprobe.secrets import mask_env, mask_text

ENTRY = "ncclprobe.engine.worker:run_jobs"
USAGE_PROBLEM = (
    "engine-usage-problem"  # a worker found a bad input: the parent reports it as exit 2
)


class EngineFailed(NcclprobeError):
    """The workers hung or crashed: a finding about this configuration (exit 1)."""

    exit_code = 1


def run_engine(
    specs: list[RunSpec],
    *,
    on_message: Callable[[dict], None] | None = None,
    timeout_s: float = 600.0,
) -> dict:
    """Run every spec in its own worker pool; return the engine-trace document."""
    for spec in specs:
        spec.check_runnable()
    runs = []
    for spec in specs:
        runs += _run_pool(spec, on_message, timeout_s)
    doc = trace_checks.finish(
        {
            "schema_version": trace.SCHEMA_VERSION,
            "kind": trace.KIND,
            "provenance": collect(),
            "config": _config(specs[0]),
            "runs": runs,
        }
    )
    add_text(doc, specs[0])
    return doc


def _run_pool(spec: RunSpec, on_message, timeout_s) -> list[dict]:
    device = spec.resolved_device()
    backend = "nccl" if device == "cuda" else "gloo"
    with tempdirs.owned("ncclprobe-engine-nccl-") as owned:
        log_dir = str(owned)
        env, rank_env = dict(spec.settings), {}
        if backend == "nccl" and _ncclprobe_logs({**spec.settings, **spec.env_after_init}):
            env.update(proof_env(tuning=False))
            rank_env = rank_log_env(log_dir)
        pool = PoolSpec(
            nranks=spec.tp,
            backend=backend,
            entry=ENTRY,
            payload={"jobs": [spec.to_json()]},
            env=env,
            rank_env=rank_env,
            timeout_s=timeout_s,
        )
        outcome = run_pool(pool, on_message=on_message)
    problems = outcome.of_kind(USAGE_PROBLEM)
    if problems:
        raise UsageProblem(problems[0]["message"])
    if outcome.status is not PoolStatus.OK:
        raise EngineFailed(
            f"engine workers ({spec.label}, tp={spec.tp}) {outcome.status}: {outcome.reason}"
        )
    logs = {m["rank"]: m for m in outcome.of_kind("engine-nccl-log")}
    exits = {m["rank"]: m["env_at_exit"] for m in outcome.of_kind("engine-worker-exit")}
    workers = [
        {
            "rank": m["rank"],
            "pid": m["pid"],
            # what the worker's environment held, masked as written: a trace gets attached to issues
            "env_at_comm_init": mask_env(m["env_at_comm_init"]),
            "env_at_exit": mask_env(exits[m["rank"]]) if exits.get(m["rank"]) is not None else None,
            "device": m["device"],
            "nccl_version": m["nccl_version"],
            "nccl_read": mask_env(logs.get(m["rank"], {}).get("nccl_read", {})),
            "nccl_warnings": [mask_text(w) for w in logs.get(m["rank"], {}).get("warnings", [])],
        }
        for m in sorted(outcome.of_kind("engine-worker"), key=lambda m: m["rank"])
    ]
    digests: dict[str, set[str]] = {}
    for m in outcome.of_kind("engine-digest"):
        digests.setdefault(m["mode"], set()).add(m["digest"])
    return [
        _run_record(spec, m, workers, len(digests.get(m["mode"], ())) == 1)
        for m in outcome.of_kind("engine-run")
    ]


def _ncclprobe_logs(settings: dict) -> bool:
    """Whether ncclprobe asks NCCL for its log (init and environment lines, a file per rank, which
    the workers parse): always, unless the user chose their own NCCL_DEBUG settings."""
    return "NCCL_DEBUG" not in settings and "NCCL_DEBUG" not in os.environ


def _run_record(spec: RunSpec, message: dict, workers: list[dict], ranks_agree: bool) -> dict:
    wall_s = message["wall_s"]
    total_count, total_bytes = _collective_totals(message["collectives"])
    histogram = message["histogram"]
    return {
        "label": spec.label,
        "mode": message["mode"],
        "settings": mask_env({**spec.settings, **spec.env_after_init}),  # as written, masked
        "env_after_init": mask_env(spec.env_after_init),
        "tokens_per_s": spec.sequences() * spec.new_tokens / wall_s if wall_s else None,
        "ms_per_token": 1000.0 * wall_s / (spec.groups() * spec.new_tokens),
        "new_tokens": spec.new_tokens,
        "wall_s": wall_s,
        "phases": message["phases"],
        "verify_decode_ratio": None,
        "acceptance": {
            "mean_length": message["mean_acceptance_length"],
            "histogram": histogram,
            "cycles": message["cycles"],
        },
        "collectives": {
            "per_token_count": total_count / (spec.groups() * spec.new_tokens),
            "per_token_bytes": total_bytes / (spec.groups() * spec.new_tokens),
            "sizes": message["collectives"],
        },
        "loop": _loop_efficiency(spec, message) if message["mode"] == Mode.SPECULATIVE else None,
        "collective_share": message["collective_share"],
        "graph_coverage": message["graph_coverage"],
        "graphs": message["graphs"],
        "repeats": _repeats(spec, message),
        "workers": workers,
        "ranks_agree": ranks_agree,
        "tokens": message["tokens"],
    }


def _repeats(spec: RunSpec, message: dict) -> dict:
    """Tokens/s of every timed repeat, their median and spread (docs/METRICS.md "Engine"). The run
    record's other figures are those of the median repeat; one repeat has no spread."""
    rates = [
        spec.sequences() * spec.new_tokens / wall
        for wall in message.get("repeat_wall_s") or [message["wall_s"]]
        if wall
    ]
    ordered = sorted(rates)
    middle = len(ordered) // 2
    median = (
        (ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2)
        if ordered
        else None
    )
    spread = (ordered[-1] - ordered[0]) / median if median and len(ordered) > 1 else None
    return {
        "n": len(rates),
        "tokens_per_s": rates,
        "tokens_per_s_median": median,
        "tokens_per_s_min": ordered[0] if ordered else None,
        "tokens_per_s_max": ordered[-1] if ordered else None,
        "spread": spread,
    }


CYCLE_PHASES = ("draft", "verify", "accept", "draft_extend")


def _loop_efficiency(spec: RunSpec, message: dict) -> dict | None:
    """Speculative loop efficiency (docs/METRICS.md "Engine"): the ideal tokens/s is what the loop
    would reach if a cycle cost only its measured phases, B x mean tokens per cycle / (sum of the
    phases' per-cycle ms); measured / ideal says how much the loop loses to prefill, host work and
    scheduling. Every input is in the record so a reader can redo the arithmetic. The efficiency
    splits exactly into `cycle_time_share` (cycles x cycle_ms over the wall time: what prefill and
    host time take) times `token_yield` (N over cycles x mean length: what the last cycles lose to
    tokens beyond N and to sequences that finished early while the batch runs on; N includes the
    prefill's token, so a very short run can yield above 1)."""
    cycles, mean_len = message["cycles"], message["mean_acceptance_length"]
    phases = message["phases"]
    per_cycle = (
        {p: (phases.get(p) or {}).get("total_ms", 0.0) / cycles for p in CYCLE_PHASES}
        if cycles
        else {}
    )
    cycle_ms = sum(per_cycle.values())
    if not cycles or not mean_len or cycle_ms <= 0:
        return None
    ideal = spec.batch * mean_len / (cycle_ms / 1000.0)
    measured = spec.sequences() * spec.new_tokens / message["wall_s"]
    return {
        "batch": spec.batch,
        "cycles": cycles,
        "mean_acceptance_length": mean_len,
        "phase_ms_per_cycle": per_cycle,
        "cycle_ms": cycle_ms,
        "ideal_tokens_per_s": ideal,
        "measured_tokens_per_s": measured,
        "efficiency": measured / ideal,
        "cycle_time_share": cycles * cycle_ms / (1000.0 * message["wall_s"]),
        "token_yield": spec.groups() * spec.new_tokens / (cycles * mean_len),
        "prefill_ms": (phases.get("prefill") or {}).get("total_ms", 0.0),
        "host_ms": (phases.get("host") or {}).get("total_ms", 0.0),
    }


def _collective_totals(sizes: list[dict]) -> tuple[int, int]:
    return sum(s["count"] for s in sizes), sum(s["count"] * s["size_bytes"] for s in sizes)


def _config(spec: RunSpec) -> dict:
    device = spec.resolved_device()
    model = spec.model_config().summary()
    return {
        "preset": spec.preset if not spec.checkpoint else None,
        "checkpoint": spec.checkpoint,
        "weights": _weights(spec),
        "prompts_given": len(spec.prompts),
        "chat": spec.chat,
        "prompt_options": list(spec.prompt_options),
        "tp": spec.tp,
        "batch": spec.batch,
        "k": spec.k,
        "prompt_len": spec.prompt_len,
        "new_tokens": spec.new_tokens,
        "temperature": spec.temperature,
        "seed": spec.seed,
        "repeats": spec.repeats,
        "graphs": spec.graphs,
        "capture_batches": list(spec.graph_batches()) if spec.graphs != GraphMode.NONE else [],
        "compile": spec.compile,
        "draft_tp": spec.draft_tp,
        "draft": spec.draft,
        "draft_trained_positions": _trained_positions(spec.draft),
        "draft_target": _draft_target(spec.draft),
        "target": spec.target_identity(),
        "dtype": spec.resolved_dtype(device),
        "device": device,
        "backend": "nccl" if device == "cuda" else "gloo",
        "model": model,
    }


def _weights(spec: RunSpec) -> dict | None:
    """Where the target's weights came from when they were converted (a .gguf: which GGUF type
    each weight was dequantized from); None for presets and Hugging Face directories."""
    from ncclprobe.engine.gguf_loader import conversion_record, is_gguf, resolve_checkpoint

    if not spec.checkpoint or not is_gguf(spec.checkpoint):
        return None
    directory = resolve_checkpoint(spec.checkpoint)
    return {**(conversion_record(directory) or {}), "converted_directory": str(directory)}


def _draft_target(draft_path: str | None) -> dict | None:
    if not draft_path:
        return None
    from ncclprobe.engine.draft import draft_target

    return draft_target(draft_path)


def _trained_positions(draft_path: str | None) -> int | None:
    if not draft_path:
        return None
    from ncclprobe.engine.draft import trained_positions

    return trained_positions(draft_path)
