"""The share of a run's time spent in collectives, measured rather than modelled.

After a run, each step kind it used (decode, verify, draft step, draft extend) is timed twice on
the same inputs, the same way the run executed it (graph replay or eager): once as run, once with
the communicator's collectives removed (for graphs: a second capture made with the communicator
disabled). The difference is that step's collective time; times the number of such steps in the
run, summed over step kinds, over the run's wall time, is the collective share. The variant
without collectives computes wrong numbers, which are discarded: only its duration is used.

Every rank executes the same measurement in lockstep, so disabling collectives never leaves a
rank waiting on a peer. Dummy inputs write KV-cache slots at positions 0..T-1 after the run has
finished; nothing reads them.
"""

from __future__ import annotations

import time

import torch

from ncclprobe.engine.graphs import CapturedStep

REPS = 10
WARMUP = 2

# phase -> (model, tokens per sequence is k+1?, feature/fuse flag)
PHASE_STEPS = {
    "decode": ("target", False, False),
    "verify": ("target", True, True),
    "draft": ("draft", False, False),
    "draft_extend": ("draft", True, True),
}


def time_call_ms(call, device) -> float:
    """Mean ms per call over REPS calls after WARMUP, synchronising only around the batch."""
    for _ in range(WARMUP):
        call()
    if torch.device(device).type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPS):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / REPS
    started = time.perf_counter()
    for _ in range(REPS):
        call()
    return 1000.0 * (time.perf_counter() - started) / REPS


def _inputs(model, kind, batch, tokens, fuse, device):
    ids = torch.zeros(batch, tokens, dtype=torch.long, device=device)
    positions = torch.arange(tokens, device=device).expand(batch, tokens).contiguous()
    if kind == "target":
        return (ids, positions)
    width = 3 * model.cfg.target_hidden if fuse else model.cfg.hidden
    return (
        ids,
        torch.zeros(batch, tokens, width, dtype=model.fc.weight.dtype, device=device),
        positions,
    )


def _step_fn(model, kind, flag):
    if kind == "target":
        return lambda t, p: model(t, p, flag)
    return lambda t, h, p: model(t, h, p, flag)


@torch.inference_mode()
def step_collective_ms(
    model, kind: str, flag: bool, *, batch: int, tokens: int, comm, device, graphed: bool
) -> float:
    """ms of collectives in one step: its time as run minus its time without collectives."""
    inputs = _inputs(model, kind, batch, tokens, flag, device)
    fn = _step_fn(model, kind, flag)
    if graphed:
        with_comm = CapturedStep("share_probe", fn, inputs, comm)
        comm.enabled = False
        try:
            without = CapturedStep("share_probe_nocomm", fn, inputs, comm)
        finally:
            comm.enabled = True
        return max(
            0.0,
            time_call_ms(with_comm.graph.replay, device)
            - time_call_ms(without.graph.replay, device),
        )
    on = time_call_ms(lambda: fn(*inputs), device)
    comm.enabled = False
    try:
        off = time_call_ms(lambda: fn(*inputs), device)
    finally:
        comm.enabled = True
    return max(0.0, on - off)


def collective_share(
    phases: dict, *, target, draft, comm, batch: int, k: int, wall_s: float, device, draft_tp: bool
) -> float:
    """Measured share (0..1) of `wall_s` spent in collectives; 0.0 when there is one rank."""
    if not comm.active or wall_s <= 0:
        return 0.0
    total_ms = 0.0
    for phase, (kind, multi, flag) in PHASE_STEPS.items():
        summary = phases.get(phase)
        if (
            not summary
            or not summary["count"]
            or (kind == "draft" and (draft is None or not draft_tp))
        ):
            continue
        model = target if kind == "target" else draft
        steps_per_phase = (k - 1) if phase == "draft" else 1  # a draft phase chains k-1 steps
        per_step = step_collective_ms(
            model,
            kind,
            flag,
            batch=batch,
            tokens=k + 1 if multi else 1,
            comm=comm,
            device=device,
            graphed=summary.get("graphed", False),
        )
        total_ms += per_step * steps_per_phase * summary["count"]
    return min(1.0, total_ms / (1000.0 * wall_s))
