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

import torch

from ncclprobe.engine.build import build_draft, build_target, max_positions, random_prompts, shard_and_allocate
from ncclprobe.engine.comm import Communicator
from ncclprobe.engine.config import preset
from ncclprobe.engine.generate import Engine
from ncclprobe.engine.instrument import CollectiveTrace, PhaseTimer
from ncclprobe.engine.spec import RunSpec
from ncclprobe.provenance import nccl_version_string, relevant_env

def run_jobs(ctx) -> None:
    if ctx.backend == "gloo" and ctx.world_size > 1:
        torch.set_num_threads(1)  # ranks share the CPU cores: oversubscribed threads stall collectives
    comm = Communicator.from_default_group()
    ctx.emit("engine-worker", pid=os.getpid(), env_at_comm_init=relevant_env(), device=str(ctx.device),
             nccl_version=nccl_version_string() if ctx.backend == "nccl" else None)
    for index, job in enumerate(ctx.payload["jobs"]):
        spec = RunSpec.from_json(job)
        for record in run_job(spec, comm, ctx.device):
            ctx.emit("engine-digest", job=index, mode=record["mode"], digest=_digest(record["tokens"]))
            if ctx.rank == 0:
                ctx.emit("engine-run", job=index, **record)


def run_job(spec: RunSpec, comm: Communicator, device):
    """Yield one measurement record per mode of `spec`, on this rank's shard."""
    torch.manual_seed(spec.seed)
    dtype = getattr(torch, spec.resolved_dtype(torch.device(device).type))
    target = _target(spec, device, dtype)
    draft = build_draft(target, seed=spec.seed, path=spec.draft) if "speculative" in spec.modes else None
    shard_and_allocate(target, draft, comm, draft_tp=spec.draft_tp, batch=spec.batch,
                       max_seq=max_positions(spec.prompt_len, spec.new_tokens, spec.k))
    prompts = random_prompts(target.cfg.vocab, spec.batch, spec.prompt_len, spec.seed, device)
    for mode in spec.modes:
        yield _measure(spec, mode, target, draft, comm, prompts, device)


def _target(spec: RunSpec, device, dtype):
    if spec.checkpoint:
        from ncclprobe.engine.hf_loader import load_checkpoint
        return load_checkpoint(spec.checkpoint, device=device, dtype=dtype)
    return build_target(preset(spec.preset), seed=spec.seed, device=device, dtype=dtype)


def _measure(spec, mode, target, draft, comm, prompts, device) -> dict:
    engine = Engine(target, draft, k=spec.k, temperature=spec.temperature, seed=spec.seed)
    run = engine.baseline if mode == "baseline" else engine.speculative
    if spec.warmup_tokens:
        run(prompts, spec.warmup_tokens)  # first-call effects (allocator, thread pools) stay out
    timer, trace = PhaseTimer(device), CollectiveTrace()
    engine.timer = timer
    trace.attach(comm, timer)
    try:
        generation = run(prompts, spec.new_tokens)
    finally:
        comm.listener = None
    return {"mode": mode, "tokens": generation.tokens, "wall_s": generation.wall_s,
            "phases": timer.summary(), "histogram": generation.histogram if mode == "speculative" else None,
            "mean_acceptance_length": generation.mean_acceptance_length, "cycles": generation.cycles,
            "collectives": trace.sizes()}


def _digest(tokens) -> str:
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16]
