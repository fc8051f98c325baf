"""The evidence diagnose reasons over, and small accessors that keep the rules short.

The engine run comes as the normalized view of `ncclprobe.enginerun` (an engine trace, profiler
traces or a server log, each turned into `EngineRun`s); a sweep results file is the JSONL of
`ncclprobe.records`; an env-check document is `ncclprobe env-check --format json` output; a
`vllm collect-env` / `sglang check_env` text gives the NCCL settings, version and topology of the
shell that collected it (not of the workers: said in a note).
Everything but the run is optional: a rule whose evidence is missing says so (NotChecked)
instead of guessing. The rules read only these objects, never a file's own keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.enginerun import RunSet, load_runs
from ncclprobe.enginerun.trace import to_runs
from ncclprobe.enginerun.view import EngineRun, Phase
from ncclprobe.envcheck.document import load_document

PHASES = ("decode", "draft", "verify", "accept", "draft_extend", "host")
OVERHEAD_PHASES = ("accept", "draft_extend", "host")


@dataclass
class Evidence:
    runs: list[EngineRun]
    config: dict = field(default_factory=dict)  # what is known of the engine's configuration
    kind: str = "engine-trace"  # engine-trace | profile | server-log
    baseline: list[EngineRun] = field(default_factory=list)  # the run to compare against
    sweep: list[dict] = field(default_factory=list)  # sweep result records
    env_check: dict | None = None
    inputs: dict = field(default_factory=dict)  # which files each piece came from
    notes: list[str] = field(default_factory=list)  # what the evidence cannot tell
    node: dict | None = None  # the GPUs and links the run saw (engine trace `node`)
    collect_env: object | None = None  # pcie.collect_env.CollectEnv: the collecting shell's view
    flight_recorder: list = field(default_factory=list)  # evidence.flight_recorder.Dump, by rank
    job_logs: list = field(default_factory=list)  # evidence.job_log.JobLog
    nccl_logs: list = field(default_factory=list)  # evidence.nccl_rank_logs.RankNcclLog

    @classmethod
    def from_trace(
        cls,
        trace: dict,
        path: str = "TRACE",
        *,
        baseline: dict | None = None,
        baseline_path: str | None = None,
        sweep: list[dict] | None = None,
        sweep_path: str | None = None,
        env_check: dict | None = None,
        env_check_path: str | None = None,
    ) -> Evidence:
        """An Evidence from engine-trace documents already in memory (tests, library users)."""
        return cls(
            runs=to_runs(trace, path),
            config=dict(trace.get("config") or {}),
            node=trace.get("node"),
            baseline=to_runs(baseline, baseline_path or "BASELINE") if baseline else [],
            sweep=sweep or [],
            env_check=env_check,
            inputs={
                "trace": path,
                "baseline": baseline_path,
                "sweep": sweep_path,
                "env_check": env_check_path,
            },
        )

    @property
    def sweep_path(self) -> str | None:
        return self.inputs.get("sweep")

    @property
    def env_check_path(self) -> str | None:
        return self.inputs.get("env_check")

    @property
    def tp(self) -> int | None:
        return self.config.get("tp")

    def all_runs(self) -> list[tuple[str, EngineRun]]:
        """Every run with the name of the input it came from ("trace" or "baseline")."""
        return [("trace", run) for run in self.runs] + [("baseline", run) for run in self.baseline]


def load_evidence(
    trace: str | Path | None = None,
    *,
    profiles=(),
    server_logs=(),
    baseline: str | Path | None = None,
    baseline_profiles=(),
    baseline_server_logs=(),
    sweep: str | Path | None = None,
    env_check: str | Path | None = None,
    model_config: str | Path | None = None,
    collect_env: str | Path | None = None,
    flight_recorder=(),
    logs=(),
    nccl_logs=(),
) -> Evidence:
    job_evidence = bool(flight_recorder or logs or nccl_logs)  # a hang needs no engine run
    main = load_runs(
        trace=trace,
        profiles=profiles,
        server_logs=server_logs,
        model_config=model_config,
        required=not job_evidence,
    )
    base = load_runs(
        trace=baseline,
        profiles=baseline_profiles,
        server_logs=baseline_server_logs,
        model_config=model_config,
        required=False,
        role="baseline",
    )
    ev = Evidence(
        runs=main.runs,
        config=_merged_config(main, base),
        kind=main.kind or "job",
        baseline=base.runs,
        inputs={
            **main.inputs,
            **{f"baseline_{k}" if k != "trace" else "baseline": v for k, v in base.inputs.items()},
        },
        notes=main.notes + [f"baseline: {n}" for n in base.notes],
        node=next((t.get("node") for t in main.traces + base.traces if t.get("node")), None),
    )
    if sweep:
        ev.sweep, ev.inputs["sweep"] = load_sweep(sweep), str(sweep)
    if env_check:
        ev.env_check, ev.inputs["env_check"] = load_document(env_check), str(env_check)
    if collect_env:
        _add_collect_env(ev, collect_env)
    if job_evidence:
        _add_job_evidence(ev, flight_recorder, logs, nccl_logs)
    return ev


def _add_job_evidence(ev: Evidence, flight_recorder, logs, nccl_logs) -> None:
    """Flight Recorder dumps, the job's logs and NCCL's logs of its ranks; exit 3 (Unsupported)
    when none of them holds anything to diagnose and no run was given either."""
    from ncclprobe.errors import Unsupported
    from ncclprobe.evidence.flight_recorder import read_flight_recorder
    from ncclprobe.evidence.job_log import read_job_log
    from ncclprobe.evidence.nccl_rank_logs import load_nccl_logs

    ev.flight_recorder = read_flight_recorder(flight_recorder)
    ev.job_logs = [read_job_log(path) for path in logs]
    ev.nccl_logs = load_nccl_logs(nccl_logs)
    ev.inputs.update(
        flight_recorder=[str(p) for p in flight_recorder],
        log=[str(p) for p in logs],
        nccl_log=[str(p) for p in nccl_logs],
    )
    recorded = any(d.entries or d.status for d in ev.flight_recorder)
    said = any(log.lines for log in ev.job_logs)
    if not (ev.runs or recorded or said or ev.nccl_logs or ev.env_check or ev.collect_env):
        raise Unsupported(
            "nothing to diagnose: "
            + (
                "the Flight Recorder dumps hold no collective (it was off: set TORCH_FR_BUFFER_SIZE)"
                if ev.flight_recorder
                else "no dumps given"
            )
            + ("; the logs are empty" if ev.job_logs else "")
        )


def _add_collect_env(ev: Evidence, path: str | Path) -> None:
    """The collect-env text as evidence: its settings are linted like every environment, its
    topology stands in for the run's GPUs where the run recorded none."""
    from ncclprobe.evidence.text import read_text_file
    from ncclprobe.evidence.topo import node_facts
    from ncclprobe.pcie.collect_env import CAVEAT, parse_collect_env

    collected = parse_collect_env(read_text_file(path, "collect-env output"))
    ev.collect_env, ev.inputs["collect_env"] = collected, str(path)
    if ev.node is None and collected.topology is not None:
        ev.node = node_facts(collected.topology).to_json()
    ev.notes += [f"{collected.tool}: {n}" for n in dict.fromkeys([CAVEAT, *collected.notes])]


def _merged_config(main: RunSet, base: RunSet) -> dict:
    """The main input's configuration, with what only the baseline knows filled in (a profile knows
    no model shape; an engine trace given as baseline does)."""
    return {
        **{k: v for k, v in base.config.items() if v is not None},
        **{k: v for k, v in main.config.items() if v is not None},
    }


def load_sweep(path: str | Path) -> list[dict]:
    from ncclprobe.records import read_results

    results = read_results(path)
    return [r for r in results.results if r.get("status") == "ok" and r.get("time_us") is not None]


# ---- accessors ------------------------------------------------------------------------------


def find_run(runs: list[EngineRun], *, mode: str, label: str | None = None) -> EngineRun | None:
    for run in runs:
        if run.mode == mode and (label is None or run.label == label):
            return run
    return None


def baseline_decode(ev: Evidence, label: str | None) -> tuple[Phase | None, str]:
    """The decode phase a speculative run should be compared with: the baseline run of the same
    label in this input, else of any label, else the --baseline input's. Returns (phase, source)."""
    for source, runs in (("this trace", ev.runs), ("--baseline", ev.baseline)):
        for lab in (label, None):
            run = find_run(runs, mode="baseline", label=lab)
            if run and run.first_of_kind("decode"):
                return run.first_of_kind("decode"), f"{source}, {run.label} baseline"
    return None, ""
