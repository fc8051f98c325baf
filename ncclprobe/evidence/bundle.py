"""The evidence diagnose reasons over, typed, and small accessors that keep the rules short.

The engine run comes as the normalized view of `ncclprobe.evidence.run` (an engine trace, profiler
traces or a server log, each turned into `EngineRun`s); a sweep results file gives its measured
`records.ResultRecord`s; an env-check document (`ncclprobe env-check --format json` output) is an
`env_check_document.EnvCheckDocument`; a `vllm collect-env` / `sglang check_env` text is a
`collect_env.CollectEnv`, the NCCL settings, version and topology of the shell that collected it
(not of the workers: said in a note); the NCCL debug logs of the job's ranks are
`nccl_rank_logs.RankNcclLog`s (what each rank's NCCL read, its version, its transports, its WARN
lines with their times); the GPUs and links the run saw are `nccl.node.NodeFacts`.
Everything but the run is optional: a rule whose evidence is missing says so (NotChecked)
instead of guessing. The rules read only these objects, never a file's own keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.live.capture_dir import CaptureRecord, capture_inputs, load_capture
from ncclprobe.evidence.live.env_check_document import EnvCheckDocument, load_document
from ncclprobe.evidence.live.host_env_checks import HostsEnvEvidence
from ncclprobe.evidence.live.processes import ProcessEvidence
from ncclprobe.evidence.machines import RUN_NODE, MachineView, machine_views
from ncclprobe.evidence.nccl.nccl_log import NcclLog
from ncclprobe.evidence.nccl.nccl_rank_logs import RankNcclLog, load_nccl_logs
from ncclprobe.evidence.node.collect_env import CAVEAT, CollectEnv, load_collect_env
from ncclprobe.evidence.p2p import P2PEvidence
from ncclprobe.evidence.run import RunSet, load_runs
from ncclprobe.evidence.run.draft_config import DraftConfig, local_draft, read_draft_config
from ncclprobe.evidence.run.trace import to_runs
from ncclprobe.evidence.run.view import EngineRun, Phase
from ncclprobe.evidence.settings import SettingsEvidence
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.records import ResultRecord, read_results

PHASES = ("decode", "draft", "verify", "accept", "draft_extend", "host")
OVERHEAD_PHASES = ("accept", "draft_extend", "host")


@dataclass
class Evidence:
    runs: list[EngineRun] = field(default_factory=list)
    config: dict = field(default_factory=dict)  # what is known of the engine's configuration
    kind: str = "engine-trace"  # engine-trace | profile | server-log
    baseline: list[EngineRun] = field(default_factory=list)  # the run to compare against
    sweep: list[ResultRecord] = field(default_factory=list)  # measured sweep results
    env_check: EnvCheckDocument | None = None
    inputs: dict = field(default_factory=dict)  # which files each piece came from
    notes: list[str] = field(default_factory=list)  # what the evidence cannot tell
    node: NodeFacts | None = None  # the GPUs and links the run saw (engine trace `node`)
    node_source: str | None = None  # whose topology `node` is: the run's own record wins
    collect_env: CollectEnv | None = None  # the collecting shell's view
    nccl_logs: list[RankNcclLog] = field(default_factory=list)  # the job's ranks' NCCL logs
    flight_recorder: list = field(default_factory=list)  # evidence.flight_recorder.Dump, by rank
    job_logs: list = field(default_factory=list)  # evidence.hang.job_log_records.JobLog
    capture: CaptureRecord | None = None  # what `ncclprobe capture` saw of the job's processes
    draft_config: DraftConfig | None = None  # the speculative draft checkpoint's config.json
    p2p: P2PEvidence | None = None  # P2P matrices, measured here (with the platform) or imported
    nccl_tests: list = field(default_factory=list)  # evidence.nccl.nccl_tests_run.NcclTestsRun
    processes: ProcessEvidence | None = None  # a live job's processes, read from /proc now
    hosts: HostsEnvEvidence | None = None  # every node's env-check documents (env-check --launcher)
    settings: SettingsEvidence | None = None  # NCCL settings to lint, with the node and version
    nccl_log: NcclLog | None = None  # one NCCL debug log read whole (`nccl-log`)
    # what each source says of the machine it describes, where two or more can be compared
    machines: list[MachineView] = field(default_factory=list)

    @classmethod
    def from_trace(
        cls,
        trace: dict,
        path: str = "TRACE",
        *,
        baseline: dict | None = None,
        baseline_path: str | None = None,
        sweep: list[ResultRecord | dict] | None = None,
        sweep_path: str | None = None,
        env_check: dict | None = None,
        env_check_path: str | None = None,
    ) -> Evidence:
        """An Evidence from engine-trace documents already in memory (tests, library users); an
        env-check document as `env-check --format json` printed it."""
        return cls(
            runs=to_runs(trace, path),
            config=dict(trace.get("config") or {}),
            node=_node(trace),
            node_source=RUN_NODE if trace.get("node") else None,
            baseline=to_runs(baseline, baseline_path or "BASELINE") if baseline else [],
            sweep=[
                r if isinstance(r, ResultRecord) else ResultRecord.from_record(r)
                for r in sweep or []
            ],
            env_check=EnvCheckDocument.from_json(env_check) if env_check is not None else None,
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
    profiles: Sequence[str | Path] = (),
    server_logs: Sequence[str | Path] = (),
    baseline: str | Path | None = None,
    baseline_profiles: Sequence[str | Path] = (),
    baseline_server_logs: Sequence[str | Path] = (),
    sweep: str | Path | None = None,
    env_check: str | Path | None = None,
    model_config: str | Path | None = None,
    collect_env: str | Path | None = None,
    flight_recorder: Sequence[str | Path] = (),
    logs: Sequence[str | Path] = (),
    nccl_logs: Sequence[str | Path] = (),
    capture: str | Path | None = None,
    draft_config: str | Path | None = None,
    live: bool = False,
) -> Evidence:
    """The files' evidence. `live`: this machine's evidence is gathered besides (diagnose
    --topo-check, --env-check PID), so no run is needed. `capture`: a directory `ncclprobe
    capture` wrote, whose files stand in for those not given one by one."""
    record = load_capture(capture) if capture else None
    notes: list[str] = []
    if record is not None:  # the capture directory's files, where not given one by one
        found = capture_inputs(record)
        profiles = tuple(profiles) or found.profiles
        server_logs = tuple(server_logs) or found.server_logs
        flight_recorder = tuple(flight_recorder) or found.flight_recorder
        logs = tuple(logs) or found.logs
        nccl_logs = tuple(nccl_logs) or found.nccl_logs
    job_evidence = bool(flight_recorder or logs or nccl_logs or record)  # a hang needs no run
    try:
        main = load_runs(
            trace=trace,
            profiles=profiles,
            server_logs=server_logs,
            model_config=model_config,
            required=not (job_evidence or live),
        )
    except UsageProblem as exc:
        if record is None:
            raise
        notes.append(f"the capture's profiles or server log could not be read: {exc}")
        main = load_runs(model_config=model_config, required=False)
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
        notes=notes + main.notes + [f"baseline: {n}" for n in base.notes],
        node=next(filter(None, map(_node, main.traces + base.traces)), None),
        capture=record,
    )
    if record is not None:
        ev.inputs["capture"] = record.directory
    _add_draft_config(ev, draft_config)
    ev.node_source = RUN_NODE if ev.node else None
    if sweep:
        ev.sweep, ev.inputs["sweep"] = load_sweep(sweep), str(sweep)
    if env_check:
        ev.env_check, ev.inputs["env_check"] = load_document(env_check), str(env_check)
    if collect_env:
        _add_collect_env(ev, collect_env)
    if job_evidence:
        _add_job_evidence(ev, flight_recorder, logs, nccl_logs)
    ev.machines = machine_views(ev)
    return ev


def _add_draft_config(ev: Evidence, given: str | Path | None) -> None:
    """The draft's config.json: the one given, else the draft directory a server log names when it
    is on this machine (said in a note)."""
    if given:
        ev.draft_config, ev.inputs["draft_config"] = read_draft_config(given), str(given)
        return
    for _src, run in ev.all_runs():
        found = local_draft((run.log or {}).get("speculative_draft_model_path"))
        if found is not None:
            ev.draft_config = read_draft_config(found)
            ev.notes.append(f"the draft's config read from {found}, the path the server log names")
            return


def _node(trace: dict) -> NodeFacts | None:
    """What NCCL's topology rules knew of the GPUs a trace's run used (None: not recorded)."""
    return NodeFacts.from_json(trace["node"]) if trace.get("node") else None


def _add_job_evidence(
    ev: Evidence,
    flight_recorder: Sequence[str | Path],
    logs: Sequence[str | Path],
    nccl_logs: Sequence[str | Path],
) -> None:
    """Flight Recorder dumps, the job's logs and NCCL's logs of its ranks; exit 3 (Unsupported)
    when none of them holds anything to diagnose and no run was given either."""
    from ncclprobe.errors import Unsupported
    from ncclprobe.evidence.hang.flight_recorder import read_flight_recorder
    from ncclprobe.evidence.hang.job_log import read_job_log

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
    if not (
        ev.runs or recorded or said or ev.nccl_logs or ev.env_check or ev.collect_env or ev.capture
    ):
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
    topology stands in for the run's GPUs only where the run recorded none (the run's own node
    wins: a collect-env text may come from another machine), named as such in `node_source`."""
    collected = load_collect_env(path)
    ev.collect_env, ev.inputs["collect_env"] = collected, str(path)
    if ev.node is None and collected.node is not None:
        ev.node = collected.node
        ev.node_source = (
            f"the {collected.tool} text {Path(path).name} (the collecting shell's machine; the run "
            "recorded no topology of its own)"
        )
    ev.notes += [f"{collected.tool}: {n}" for n in dict.fromkeys([CAVEAT, *collected.notes])]


def _merged_config(main: RunSet, base: RunSet) -> dict:
    """The main input's configuration, with what only the baseline knows filled in (a profile knows
    no model shape; an engine trace given as baseline does)."""
    return {
        **{k: v for k, v in base.config.items() if v is not None},
        **{k: v for k, v in main.config.items() if v is not None},
    }


def load_sweep(path: str | Path) -> list[ResultRecord]:
    """The results a comparison may use: measured fine (status ok, with a time)."""
    return [r for r in read_results(path).results if r.measured]


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
                return run.first_of_kind("decode"), f"{source}, {run.label} {run.mode_text}"
    return None, ""
