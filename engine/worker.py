"""The rank side of `run-engine`: the entry `ncclprobe.engine.worker:run_jobs` runs in every TP
worker started by `ncclprobe.launch.run_pool` (or under torchrun).

Each job (a `RunSpec` as JSON) builds the target and draft, shards them for this rank, and runs
the requested modes on the same prompts. Rank 0 reports the measurements; every rank reports its
NCCL environment and a digest of the tokens it generated, so the parent can prove that every
rank received the settings and that all ranks produced the same output.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import torch

from ncclprobe.engine.build import (
    build_draft,
    build_target,
    random_prompts,
    shard_and_allocate,
)
from ncclprobe.engine.comm import Communicator
from ncclprobe.engine.config import preset
from ncclprobe.engine.generate import Engine, Generation
from ncclprobe.engine.graphs import CapturedGraphs, GraphedSteps
from ncclprobe.engine.instrument import CollectiveTrace, PhaseTimer, events_needed
from ncclprobe.engine.limits import max_positions
from ncclprobe.engine.profiling import profiled
from ncclprobe.engine.runner import USAGE_PROBLEM
from ncclprobe.engine.share import collective_share
from ncclprobe.engine.spec import RunSpec
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.modes import GraphMode, Mode
from ncclprobe.nccl.recipes import own_log
from ncclprobe.provenance import nccl_version_string, relevant_env


def run_jobs(ctx) -> None:
    """Run every job; a bad input found only here (a draft file that is not safetensors, heads not
    divisible by --tp, a directory without config.json) goes to the parent as one message, which
    it reports as a one-line usage error instead of this rank's traceback."""
    try:
        _run_jobs(ctx)
    except UsageProblem as problem:
        ctx.emit(USAGE_PROBLEM, message=str(problem))
        raise


def _run_jobs(ctx) -> None:
    jobs = ctx.payload["jobs"]
    comm = Communicator.from_default_group(
        issue_single_rank=any(j.get("single_rank_collectives") for j in jobs)
    )
    _create_communicator(comm, ctx.device)
    late = {key: value for job in jobs for key, value in (job.get("env_after_init") or {}).items()}
    asked = {key for job in jobs for key in job.get("settings", {})} | set(late)
    ctx.emit(
        "engine-worker",
        pid=os.getpid(),
        env_at_comm_init=_env_snapshot(asked),
        device=str(ctx.device),
        nccl_version=nccl_version_string() if ctx.backend == "nccl" else None,
    )
    os.environ.update(
        late
    )  # too late on purpose: NCCL read its settings when the communicator was created
    for index, job in enumerate(ctx.payload["jobs"]):
        spec = RunSpec.from_json(job)
        for record in run_job(spec, comm, ctx.device):
            ctx.emit(
                "engine-digest", job=index, mode=record["mode"], digest=_digest(record["tokens"])
            )
            if ctx.rank == 0:
                ctx.emit("engine-run", job=index, **record)
    ctx.emit("engine-worker-exit", env_at_exit=_env_snapshot(asked))
    _report_nccl_log(ctx)


def _create_communicator(comm: Communicator, device) -> None:
    """Create the communicator now, so the environment reported as `env_at_comm_init` is the one NCCL
    read (torch creates NCCL communicators lazily, at the first collective). Not traced: it goes
    straight to torch.distributed, not through the engine's communicator."""
    if comm.active and comm.enabled:
        import torch.distributed as dist

        dist.all_reduce(torch.zeros(1, device=device), group=comm.group)


def _env_snapshot(asked: set[str]) -> dict[str, str]:
    return relevant_env() | {key: os.environ[key] for key in asked if key in os.environ}


def _report_nccl_log(ctx) -> None:
    """What NCCL itself says it read: this rank's debug log, written where the runner asked,
    parsed by the evidence reader. Nothing to report on gloo or when the user chose NCCL_DEBUG."""
    path = own_log(ctx.rank)
    if path is None or not path.exists():
        return
    from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log

    parsed = parse_nccl_log(path.read_text(errors="replace"))
    ctx.emit(
        "engine-nccl-log",
        nccl_read=parsed.env,
        nccl_version=parsed.nccl_version,
        warnings=parsed.warnings[:20],
        transports=parsed.transports,
    )


def run_job(spec: RunSpec, comm: Communicator, device):
    """Yield one measurement record per mode of `spec`, on this rank's shard."""
    torch.manual_seed(spec.seed)
    dtype = getattr(torch, spec.resolved_dtype(torch.device(device).type))
    target = _target(spec, device, dtype)
    draft = (
        build_draft(target, seed=spec.seed, path=spec.draft)
        if Mode.SPECULATIVE in spec.modes
        else None
    )
    shard_and_allocate(
        target,
        draft,
        comm,
        draft_tp=spec.draft_tp,
        batch=spec.cache_batch(),
        max_seq=max_positions(spec.prompt_len, spec.new_tokens, spec.k),
    )
    prompts = _prompts(spec, target.cfg.vocab, device)
    for mode in spec.modes:
        yield _measure(spec, mode, target, draft, comm, prompts, device)


def _prompts(spec: RunSpec, vocab: int, device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(prompts [sequences, prompt_len], lengths [sequences] or None): the given prompts
    right-padded to the longest (generate._last), or seeded random ones."""
    if not spec.prompts:
        return random_prompts(vocab, spec.batch, spec.prompt_len, spec.seed, device), None
    padded = torch.zeros(len(spec.prompts), spec.prompt_len, dtype=torch.long)
    for row, ids in enumerate(spec.prompts):
        padded[row, : len(ids)] = torch.tensor(ids)
    lengths = torch.tensor([len(ids) for ids in spec.prompts])
    return padded.to(device), lengths.to(device)


def _target(spec: RunSpec, device, dtype):
    if spec.checkpoint:
        from ncclprobe.engine.gguf_loader import resolve_checkpoint
        from ncclprobe.engine.hf_loader import load_checkpoint

        return load_checkpoint(resolve_checkpoint(spec.checkpoint), device=device, dtype=dtype)
    return build_target(preset(spec.preset), seed=spec.seed, device=device, dtype=dtype)


def _decode_groups(run, prompts, new_tokens: int, batch: int) -> Generation:
    """Decode the prompts `batch` at a time, one batch after another, as one generation: tokens in
    prompt order, wall time, acceptance histogram and cycles summed."""
    tokens, lengths = prompts
    total = Generation(tokens=[], wall_s=0.0)
    for start in range(0, tokens.shape[0], batch):
        part = run(
            tokens[start : start + batch],
            new_tokens,
            None if lengths is None else lengths[start : start + batch],
        )
        total.tokens += part.tokens
        total.wall_s += part.wall_s
        total.cycles += part.cycles
        total.histogram = [a + b for a, b in zip(total.histogram, part.histogram)] or list(
            part.histogram
        )
    return total


def _measure(spec, mode, target, draft, comm, prompts, device) -> dict:
    """The mode's record: `spec.repeats` timed runs over the same captured graphs, the one of
    median wall time kept whole, every repeat's wall time beside it (`repeat_wall_s`)."""
    graphs = None
    if spec.graphs != GraphMode.NONE:
        graphs = CapturedGraphs(
            target,
            draft,
            comm,
            mode=spec.graphs,
            compile=spec.compile,
            batches=spec.graph_batches(),
            k=spec.k,
            speculative=mode == Mode.SPECULATIVE,
            greedy=spec.temperature == 0,
            prompt_len=spec.prompt_len,
        )
    if spec.warmup_tokens:  # first-call effects (allocator, thread pools) stay out
        warm = _engine(spec, target, draft, graphs).loop(mode)
        warm(
            prompts[0][: spec.batch],
            spec.warmup_tokens,
            None if prompts[1] is None else prompts[1][: spec.batch],
        )
    timed = [
        _timed(spec, mode, target, draft, graphs, comm, prompts, device, profile=i == 0)
        for i in range(spec.repeats)
    ]
    walls = [run.generation.wall_s for run in timed]
    median = sorted(timed, key=lambda run: run.generation.wall_s)[(len(timed) - 1) // 2]
    generation, timer, trace, steps = median.generation, median.timer, median.trace, median.steps
    phases = timer.summary(
        graphed={p: p in steps.graphed_phases for p in timer.current_names()} if steps else None,
        wall_s=generation.wall_s,
        steps=generation.cycles
        if mode == Mode.SPECULATIVE
        else spec.groups() * (spec.new_tokens - 1),
    )
    return {
        "mode": mode,
        "tokens": generation.tokens,
        "wall_s": generation.wall_s,
        "repeat_wall_s": walls,
        "phases": phases,
        "histogram": generation.histogram if mode == Mode.SPECULATIVE else None,
        "mean_acceptance_length": generation.mean_acceptance_length,
        "cycles": generation.cycles,
        "collectives": trace.sizes(),
        "graphs": graphs.graph_names() if graphs else [],
        "graph_coverage": _coverage(phases, generation.wall_s, device),
        "collective_share": collective_share(
            phases,
            target=target,
            draft=draft,
            comm=comm,
            batch=spec.batch,
            k=spec.k,
            wall_s=generation.wall_s,
            device=device,
            draft_tp=spec.draft_tp,
        )
        if spec.measure_share
        else None,
    }


@dataclass(frozen=True)
class TimedRun:
    """One timed run: what it generated, its phase timer, its collective trace, and its graph
    replays (None: every step eager)."""

    generation: Generation
    timer: PhaseTimer
    trace: CollectiveTrace
    steps: GraphedSteps | None


def _timed(spec, mode, target, draft, graphs, comm, prompts, device, *, profile: bool) -> TimedRun:
    """A timed run on a fresh engine over the captured graphs. Only the first repeat is profiled
    (--profile writes one trace per rank and mode)."""
    timer = PhaseTimer(
        device,
        reserve=spec.groups() * events_needed(spec.new_tokens),
        annotate=bool(spec.profile_dir),
    )
    trace = CollectiveTrace()
    engine = _engine(spec, target, draft, graphs, trace=trace, timer=timer)
    trace.attach(comm, timer)
    try:
        with profiled(
            spec.profile_dir if profile else None,
            label=spec.label,
            mode=mode,
            rank=comm.rank,
            device=device,
        ):
            generation = _decode_groups(engine.loop(mode), prompts, spec.new_tokens, spec.batch)
    finally:
        comm.listener = None
    steps = engine.steps if isinstance(engine.steps, GraphedSteps) else None
    return TimedRun(generation, timer, trace, steps)


def _engine(
    spec: RunSpec,
    target,
    draft,
    graphs: CapturedGraphs | None,
    *,
    trace: CollectiveTrace | None = None,
    timer: PhaseTimer | None = None,
) -> Engine:
    """An engine for one run of `spec`: replaying `graphs` where they were captured (None: every
    step eager), timed by `timer` and with its collectives in `trace` (None: an untimed run)."""
    steps = GraphedSteps(graphs, trace=trace, timer=timer) if graphs is not None else None
    return Engine(
        target,
        draft,
        k=spec.k,
        temperature=spec.temperature,
        seed=spec.seed,
        steps=steps,
        timer=timer,
    )


def _coverage(phases: dict, wall_s: float, device) -> float | None:
    """Share of the run's wall time spent in phases whose step ran as a graph replay (the few
    small eager ops around a replay, e.g. the argmax, count with it). None on CPU: no graphs."""
    if torch.device(device).type != "cuda":
        return None
    graphed_ms = sum(p["total_ms"] for p in phases.values() if p.get("graphed"))
    return min(1.0, graphed_ms / (1000.0 * wall_s)) if wall_s > 0 else None


def _digest(tokens) -> str:
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16]
