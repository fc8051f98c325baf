"""One result record from every rank's messages for one measurement (the format: ncclprobe.records)."""

from __future__ import annotations

from dataclasses import replace

from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.records import ResultRecord, Status
from ncclprobe.stats import aggregate_trials, issue_time, iteration_stats
from ncclprobe.sweep.cost_split import cost_split
from ncclprobe.sweep.plan import Config, SweepSpec


def iteration_clock(spec: SweepSpec, mode: str) -> str:
    """What one per-iteration sample is (docs/METRICS.md)."""
    if spec.backend != "nccl":
        return "perf_counter per iteration"
    if mode == "graph":
        return "CUDA events per graph replay"
    return "CUDA events per iteration" if spec.iter_events else "CUDA events per trial"


def result_record(
    spec: SweepSpec, config: Config, by_rank: dict[int, dict], config_status: str
) -> ResultRecord:
    """The measurement every rank reported (`by_rank`: each rank's result message) as one record: an
    error naming the ranks that failed, or the slowest rank's timing, with wrong elements counted."""
    first = by_rank[min(by_rank)]
    coll = COLLECTIVES[first["collective"]]
    shape = coll.shape(first["size_bytes"], first["dtype"], spec.nranks)
    errors = [f"rank {rank}: {m['error']}" for rank, m in sorted(by_rank.items()) if m.get("error")]
    unmeasured = ResultRecord(
        config_id=config.config_id,
        settings=config.settings,
        collective=coll.name,
        op=first["op"],
        mode=first["mode"],
        in_place=first["in_place"],
        dtype=first["dtype"],
        size_bytes=shape.size_bytes,
        count=first["count"],
        root=coll.root,
        nranks=spec.nranks,
        status=Status.ERROR,
        reason="; ".join(errors) or "no timing reported",
        checked=False,
        agg=spec.agg,
        path=spec.path,
        buffers=spec.buffers,
        source="sweep",
    )
    if errors or any(not m.get("trial_us") for m in by_rank.values()):
        return unmeasured
    timing = aggregate_trials({rank: m["trial_us"] for rank, m in by_rank.items()})
    clock = iteration_clock(spec, first["mode"])
    samples = {
        rank: (m["iter_us"] if clock != "CUDA events per trial" else m["trial_us"])
        for rank, m in by_rank.items()
    }
    algbw, busbw = coll.bandwidths(shape, timing.time_us, spec.nranks)
    checked = [m["wrong"] for m in by_rank.values() if m.get("wrong") is not None]
    wrong = sum(checked) if checked else None
    status = (
        Status.WRONG
        if wrong
        else (
            Status(config_status) if config_status in (Status.OK, Status.IGNORED) else Status.ERROR
        )
    )
    return replace(
        unmeasured,
        status=status,
        reason=None if status is Status.OK else f"configuration {config_status}",
        time_us=timing.time_us,
        time_us_p10=timing.time_us_p10,
        time_us_p90=timing.time_us_p90,
        rank_spread_us=timing.rank_spread_us,
        trials=timing.trials,
        iter=iteration_stats(samples, clock),
        cpu_issue_us=issue_time({r: m["issue_us"] for r, m in by_rank.items()}),
        cost_split=cost_split(by_rank, spec.path, timing.time_us),
        algbw_gbps=algbw,
        busbw_gbps=busbw,
        wrong=wrong,
        checked=wrong is not None,
        issued_by=first.get("issued_by"),
        issued_by_why=first.get("issued_by_why"),
    )
