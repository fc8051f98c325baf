"""Run a planned sweep: one worker pool at a time, records written as configurations finish.

A pool runs its configurations in order and reports each through messages. When every rank has
ended a configuration, its records are written (config record, then its results), fsynced, so
a killed sweep keeps every finished configuration. When a pool hangs or a rank crashes, the
configuration it was in is recorded as `hang` or `error` and the configurations after it go to a
fresh pool: one bad setting never takes the rest of the sweep with it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ncclprobe import tempdirs
from ncclprobe.launch import PoolSpec, PoolStatus, run_pool
from ncclprobe.nccl.recipes import (
    PROOF_VARIABLES,
    SHARE_GPU_RANK_ENV,
    proof_env,
    rank_log,
    rank_log_env,
    share_gpu_env,
)
from ncclprobe.records import ResultRecord, Status
from ncclprobe.records_writer import ResultWriter
from ncclprobe.sweep.plan import (
    Config,
    Pool,
    Skip,
    SweepSpec,
    build_grid,
    plan_cases,
    plan_pools,
    skip_equivalent_levels,
)
from ncclprobe.sweep.proof import prove
from ncclprobe.sweep.result import result_record

log = logging.getLogger("ncclprobe.sweep")

ENTRY = "ncclprobe.probes.sweep_worker:run"


@dataclass
class SweepStats:
    """What the summary record reports: outcome counts and what pool reuse saved."""

    statuses: dict[str, int] = field(default_factory=dict)
    pools_run: int = 0
    configs_run: int = 0
    pool_start_s: list[float] = field(default_factory=list)  # launch to every rank ready
    pool_overhead_s: list[float] = field(
        default_factory=list
    )  # a pool's life outside its configurations
    config_s: list[float] = field(default_factory=list)

    def count(self, status: str) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def summary(self, wall_s: float) -> dict:
        start = _mean(self.pool_start_s)
        overhead = _mean(self.pool_overhead_s)
        avoided = max(0, self.configs_run - self.pools_run)
        return {
            "record": "summary",
            "wall_s": round(wall_s, 3),
            "statuses": dict(self.statuses),
            "configs_run": self.configs_run,
            "pools_run": self.pools_run,
            "pool_start_s_mean": _round(start),
            "pool_overhead_s_mean": _round(overhead),
            "config_s_mean": _round(_mean(self.config_s)),
            "pools_avoided": avoided,
            "pool_reuse_saved_s_est": _round(start * avoided) if start is not None else None,
            "pool_reuse_saved_basis": POOL_REUSE_BASIS,
        }


# What `pool_reuse_saved_s_est` is: each avoided pool would have paid one more measured start. Not
# start + teardown: docs/LOG.md measured that formula 37 % above the real saving (teardown overlaps
# the next pool's start); the start alone came within 6 % of it there. Still not a measurement.
POOL_REUSE_BASIS = "estimate: pool_start_s_mean x pools_avoided (not measured; docs/METRICS.md)"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def configs_to_run(
    spec: SweepSpec, equivalent_levels: list[list[str]] | None
) -> tuple[list[Config], list[Skip]]:
    configs = build_grid(spec.grid)
    if equivalent_levels:
        return skip_equivalent_levels(configs, equivalent_levels)
    return configs, []


def run_sweep(
    spec: SweepSpec,
    writer: ResultWriter,
    *,
    done: AbstractSet[str] = frozenset(),
    equivalent_levels: list[list[str]] | None = None,
    progress=None,
) -> dict:
    """Measure every configuration not in `done`; return the summary record (also written)."""
    started = time.monotonic()
    configs, skips = configs_to_run(spec, equivalent_levels)
    recorder = Recorder(writer, progress=progress)
    for skip in skips:
        if skip.config.config_id not in done:
            recorder.skipped(skip)
    queue = deque(plan_pools([c for c in configs if c.config_id not in done]))
    with tempdirs.owned("ncclprobe-sweep-") as log_dir:
        while queue:
            pool = queue.popleft()
            index = recorder.stats.pools_run
            directory = pool_dir(Path(log_dir), index)
            directory.mkdir()
            left = PoolRun(spec, pool, index=index, log_dir=directory, recorder=recorder).run()
            recorder.stats.pools_run += 1
            if left:
                queue.appendleft(Pool(pool.process_settings, left))
    summary = recorder.stats.summary(time.monotonic() - started)
    writer.write(summary)
    return summary


def pool_dir(root: Path, index: int) -> Path:
    """Where pool `index` keeps its ranks' NCCL logs (and, under torchrun, their messages)."""
    return root / f"pool{index}"


class ProgressBar(Protocol):
    """What shows the configurations as they end (`cli.output`'s progress bar)."""

    def advance(self, what: str = "", steps: int = 1) -> None: ...


@dataclass
class Recorder:
    """Where a sweep's records go as configurations end: the results file, the counts of the
    summary record and the progress bar (None: no progress shown)."""

    writer: ResultWriter
    stats: SweepStats = field(default_factory=SweepStats)
    progress: ProgressBar | None = None

    def config(
        self,
        config: Config,
        status: Status,
        reason: str | None,
        proof: dict | None,
        *,
        pool: int,
        results: Sequence[ResultRecord] = (),
    ) -> None:
        """A configuration's record, then its result records: the group --resume keeps or cuts whole."""
        self.writer.write(
            {
                "record": "config",
                "config_id": config.config_id,
                "settings": config.settings,
                "pool": pool,
                "status": status,
                "reason": reason,
                "results_expected": len(results),
                "proof": proof,
            }
        )
        for record in results:
            self.writer.write(record.to_record())
        self.stats.count(status)
        self.stats.configs_run += 1
        self._advance(f"{config.config_id}: {status}")

    def skipped(self, skip: Skip) -> None:
        self.writer.write(
            {
                "record": "config",
                "config_id": skip.config.config_id,
                "settings": skip.config.settings,
                "pool": None,
                "status": Status.SKIPPED,
                "reason": skip.reason,
                "measured_as": skip.measured_as,
                "results_expected": 0,
                "proof": None,
            }
        )
        self.stats.count(Status.SKIPPED)
        self._advance(skip.config.config_id)

    def _advance(self, what: str) -> None:
        if self.progress:
            self.progress.advance(what)


def pool_payload(spec: SweepSpec, pool: Pool) -> dict:
    """What every worker of a pool gets: its configurations, the cases and how to measure."""
    return {
        "configs": [
            {"config_id": c.config_id, "comm_settings": c.comm_settings} for c in pool.configs
        ],
        "cases": plan_cases(spec)[0],
        "sizes": list(spec.sizes),
        "in_place": list(spec.in_place),
        "modes": list(spec.modes),
        "warmup": spec.warmup,
        "iters": spec.iters,
        "trials": spec.trials,
        "agg": spec.agg,
        "check": spec.check,
        "buffers": spec.buffers,
        "path": spec.path,
        "iter_events": spec.iter_events,
        "cost_split": spec.cost_split,
    }


def pool_spec(spec: SweepSpec, pool: Pool, log_dir: Path) -> PoolSpec:
    """How a pool's workers start: the proof environment and a log per rank in `log_dir` (NCCL),
    the pool's once-per-process settings, the --share-gpu recipe, and nothing of the swept
    variables inherited from this shell."""
    nccl = spec.backend == "nccl"
    swept = tuple(sorted(spec.grid))
    env = {**(proof_env() if nccl else {}), **pool.process_settings}
    rank_env = rank_log_env(log_dir) if nccl else {}
    unset = swept + (PROOF_VARIABLES if nccl else ())
    if spec.share_gpu:
        env = {**share_gpu_env(swept), **env}
        rank_env = {**rank_env, **SHARE_GPU_RANK_ENV}
        unset += tuple(SHARE_GPU_RANK_ENV)
    return PoolSpec(
        nranks=spec.nranks,
        backend=spec.backend,
        entry=ENTRY,
        payload=pool_payload(spec, pool),
        env=env,
        unset=unset,
        rank_env=rank_env,
        timeout_s=spec.timeout_s,
        gpu=0 if spec.share_gpu else None,
    )


class PoolRun:
    """One pool's life: start it, turn its messages into records, say what is left to run."""

    def __init__(
        self, spec: SweepSpec, pool: Pool, *, index: int, log_dir: Path, recorder: Recorder
    ):
        self.spec, self.pool, self.index = spec, pool, index
        self.log_dir = log_dir  # this pool's: its ranks' NCCL logs
        self.recorder, self.stats = recorder, recorder.stats
        self.swept = sorted(spec.grid)
        self.by_config: dict[str, dict] = {
            c.config_id: {"starts": {}, "ends": {}, "results": {}} for c in pool.configs
        }
        self.finished: list[str] = []
        self.ready: set[int] = set()
        self.config_began: dict[str, float] = {}
        self.config_s_total = 0.0

    def run(self) -> list[Config]:
        self.began = time.monotonic()
        outcome = run_pool(
            pool_spec(self.spec, self.pool, self.log_dir), on_message=self._on_message
        )
        if outcome.status is PoolStatus.OK and self.config_s_total:
            self.stats.pool_overhead_s.append(max(0.0, outcome.wall_s - self.config_s_total))
        left = [c for c in self.pool.configs if c.config_id not in self.finished]
        if outcome.status is PoolStatus.OK or not left:
            if left:  # every rank exited cleanly yet some configurations never ended
                self._write_failed(
                    left[0], Status.ERROR, "the pool ended without finishing this configuration"
                )
                return left[1:]
            return []
        self._write_failed(left[0], Status(outcome.status), outcome.reason)
        return left[1:]

    def replay(self, messages: list[dict], why: str | None = None) -> None:
        """Records from messages that workers wrote elsewhere (torchrun); unfinished configs are
        errors (`why`: what the launch that ran them said, if it failed).

        Pool start is not measured here: nobody here saw the pool start."""
        for message in messages:
            if message.get("kind") != "ready":
                self._on_message(message)
        reason = "not every rank reported the end of this configuration"
        for config in self.pool.configs:
            if config.config_id not in self.finished:
                self._write_failed(config, Status.ERROR, reason + (f" ({why})" if why else ""))

    def _on_message(self, message: dict) -> None:
        kind, rank = message.get("kind"), message["rank"]
        if kind == "ready":
            self.ready.add(rank)
            if len(self.ready) == self.spec.nranks:
                self.stats.pool_start_s.append(time.monotonic() - self.began)
            return
        state = self.by_config.get(str(message.get("config_id")))
        if state is None:
            return
        if kind == "config-start":
            state["starts"][rank] = message
            self.config_began.setdefault(message["config_id"], message.get("t", time.time()))
        elif kind == "result":
            key = tuple(
                message[k] for k in ("collective", "op", "dtype", "mode", "in_place", "size_bytes")
            )
            state["results"].setdefault(key, {})[rank] = message
        elif kind == "config-end":
            state["ends"][rank] = message
            if len(state["ends"]) == self.spec.nranks:
                self._finish(message["config_id"], state, message.get("t", time.time()))

    def _finish(self, config_id: str, state: dict, ended_at: float) -> None:
        config = next(c for c in self.pool.configs if c.config_id == config_id)
        seen = {rank: m["seen_env"] for rank, m in state["starts"].items()}
        status, reason, proof = prove(
            config.settings,
            self.swept,
            seen,
            self.spec.backend,
            self._logs(state),
            collectives=self.spec.collectives,
        )
        ordered = sorted(state["results"].items(), key=lambda item: self._order(item[0]))
        results = [result_record(self.spec, config, by_rank, status) for _, by_rank in ordered]
        wrong = [r for r in results if r.status is Status.WRONG]
        if wrong and status in (Status.OK, Status.IGNORED):
            status, reason = Status.WRONG, f"{len(wrong)} measurement(s) returned wrong elements"
            log.error("WRONG RESULTS with %s: %s", config_id, reason)
        self.recorder.config(
            config, Status(status), reason, proof, pool=self.index, results=results
        )
        self.finished.append(config_id)
        spent = max(0.0, ended_at - self.config_began.get(config_id, ended_at))  # workers' clocks
        self.stats.config_s.append(spent)
        self.config_s_total += spent

    def _logs(self, state) -> dict[int, tuple[str, str]] | None:
        if self.spec.backend != "nccl":
            return None
        logs = {}
        for rank, start in state["starts"].items():
            path = rank_log(self.log_dir, rank)
            try:
                data = path.read_bytes()
            except OSError:
                continue
            end = state["ends"][rank]["log_offset"]  # offsets are bytes: slice before decoding
            logs[rank] = (
                data[:end].decode("utf-8", "replace"),
                data[start["log_offset"] : end].decode("utf-8", "replace"),
            )
        return logs

    def _order(self, key: tuple) -> tuple:
        """The spec's order: collective, op, dtype as given; mode; in place first; size."""
        collective, op, dtype, mode, in_place, size = key
        spec = self.spec
        index = lambda values, value: values.index(value) if value in values else len(values)
        return (
            index(spec.collectives, collective),
            index(spec.ops, op),
            index(spec.dtypes, dtype),
            index(spec.modes, mode),
            not in_place,
            size,
        )

    def _write_failed(self, config: Config, status: Status, reason: str | None) -> None:
        log.warning("%s: %s", config.config_id, status)
        self.recorder.config(config, status, reason, None, pool=self.index)
