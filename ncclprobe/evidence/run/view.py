"""The normalized view of an engine run: what every diagnose rule reads, whatever the evidence.

Three kinds of evidence become this view: ncclprobe's own engine trace (`run-engine --trace`), a
PyTorch profiler trace of any engine (SGLang, vLLM, Hugging Face, ours), and an SGLang or vLLM
server log. Each knows different things, so every field that a source cannot know is None (or
empty), and `notes` says in words what could not be known and why. A rule that needs a missing
field reports it as not checked instead of guessing.

- `EngineRun`: one run of one mode (baseline decode, or speculative), with its phases, its
  collectives, its acceptance and its speed.
- `Phase`: the steps of one kind. `name` is the source's own (`verify`, `draft_extend`,
  `step[DECODE]`), `kind` one of decode, verify, draft, prefill, other. Per step: its time
  (`median_ms`, what the host saw from the step's start to its end), the GPU's busy time inside
  it (`device_ms`), the GPU idle time inside it (`idle_ms`: the host did not keep the GPU fed),
  and whether it ran as a CUDA/HIP graph replay (`graphed`, with `graph_share`, the share of its
  kernel time that came from graph launches) or as individual kernel launches (`launches`, by
  kind).
- `Collective`: calls of one operation and size (None: not known, e.g. replayed from a graph
  whose capture the profile does not hold), with dtype, group size, algorithm and protocol where
  known, and whether it ran inside a graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ncclprobe.evidence.run.modes import Mode

if TYPE_CHECKING:  # the profile reader fills it; this view is below it
    from ncclprobe.evidence.run.profile.align import Alignment

SPECULATIVE_KINDS = ("verify", "draft")
# ncclprobe's engine phases (docs/DESIGN.md "Engine trace") by kind
ENGINE_PHASE_KIND = {
    "decode": "decode",
    "verify": "verify",
    "draft": "draft",
    "draft_extend": "draft",
    "prefill": "prefill",
    "accept": "other",
    "host": "other",
}


@dataclass(frozen=True)
class Phase:
    name: str
    kind: str
    count: int  # steps
    total_ms: float
    median_ms: float | None  # per step, as the host saw it (start to end)
    p90_ms: float | None = None
    graphed: bool | None = None  # True: graph replay; False: individual launches; None: unknown
    device_ms: float | None = None  # median GPU busy time per step
    idle_ms: float | None = None  # median GPU idle time inside a step
    graph_share: float | None = None  # share of the step's kernel time launched from graphs
    launches: dict = field(
        default_factory=dict
    )  # median launches per step by kind (kernel, graph, memcpy)
    tokens_per_seq: float | None = None  # tokens per sequence in one step (1: decode; k+1: verify)
    batch: int | None = None  # sequences per step, where known
    found_by: str = ""  # how the steps were found (annotation, gaps, engine timer)
    collective_ms: float | None = None  # median per step: wall time with a collective running
    # profiles: the spread of the GPU idle share over the steps (10th, 90th percentile), the GPU
    # span of the kernels a graph launch issued (median per step), and the tokens the steps kept
    # for their sequence (None: not known, e.g. a verify whose acceptance the trace does not hold)
    idle_share_range: tuple[float, float] | None = None
    graph_ms: float | None = None
    tokens_kept: float | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Collective:
    op: str  # all_reduce, all_gather, ...
    size_bytes: int | None  # bytes per call (the buffer); None: not known
    count: float  # calls (in the run, or per step for a profile)
    dtype: str | None = None
    phase: str | None = None
    graph: str | bool | None = None  # the captured graph's name, True (some graph), None: eager
    group_size: int | None = None
    algo: str | None = None  # from the kernel name: what was launched
    proto: str | None = None
    time_us: float | None = None  # summed kernel (or host op) time of these calls
    size_source: str = "engine"  # engine | kernel args | capture | host op | unknown
    # what moved the data (profiles): NCCL, RCCL, gloo, DeepEP, custom all-reduce, symmetric
    # memory, copy engine... (profile.comm_names.communication_kernel); None: not recorded
    library: str | None = None
    calls_us: tuple[float, ...] = ()  # each call's time (profiles), for the noise rule

    @property
    def eager(self) -> bool:
        return not self.graph

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Worker:
    rank: int | None
    pid: int | None
    env_at_comm_init: dict | None  # NCCL_* etc. when the worker created its communicator
    later_env: dict = field(default_factory=dict)  # a later snapshot (env_at_exit, ...)
    nccl_read: dict = field(default_factory=dict)  # what NCCL's own log says it read
    nccl_version: str | None = None


@dataclass(frozen=True)
class Acceptance:
    mean_length: float | None  # tokens a sequence gains per cycle, bonus included
    histogram: tuple[int, ...] = ()  # cycles that kept i drafts, i = 0..k
    per_position: tuple[float, ...] = ()  # acceptance rate of draft position 1..k (vLLM logs)
    source: str = ""

    def tokens_per_cycle(self) -> float | None:
        total = sum(self.histogram)
        if total:
            return sum(i * n for i, n in enumerate(self.histogram)) / total + 1.0
        return self.mean_length


@dataclass
class EngineRun:
    label: str
    mode: str | None  # baseline | speculative | None (not known)
    source: str  # engine-trace | profile | server-log
    path: str = ""
    engine: str = "ncclprobe"  # ncclprobe | sglang | vllm | torch | unknown
    phases: dict[str, Phase] = field(default_factory=dict)
    collectives: list[Collective] = field(default_factory=list)
    acceptance: Acceptance | None = None
    tokens_per_s: float | None = None
    ms_per_token: float | None = None
    tokens_per_s_repeats: tuple[
        float, ...
    ] = ()  # every timed repeat (run-engine --repeats); () unknown
    new_tokens: float | None = None  # tokens each sequence slot generated over the whole run
    wall_s: float | None = None
    collective_share: float | None = None  # measured share of the run's time in collectives
    graph_coverage: float | None = None
    verify_decode_ratio: float | None = None
    settings: dict = field(default_factory=dict)  # NCCL settings the run asked for
    workers: list[Worker] = field(default_factory=list)
    graphs: list[str] = field(default_factory=list)
    per_token_count: float | None = None
    per_token_bytes: float | None = None
    ranks: list[dict] = field(default_factory=list)  # per-rank step summaries (profiles)
    alignment: Alignment | None = None  # several ranks' profiles (evidence.run.profile.align)
    log: dict | None = None  # server-log statistics (batches with graphs, sizes, ...)
    # profiles: (profile.host.HostReport, its rank): the host work behind the GPU's idle time
    host: tuple | None = None
    notes: list[str] = field(default_factory=list)  # what this evidence cannot tell, in words

    def speed_range(self) -> tuple[float, float] | None:
        """(slowest, fastest) tokens/s over the repeats; None from one measurement (no spread)."""
        rates = self.tokens_per_s_repeats
        return (min(rates), max(rates)) if len(rates) > 1 else None

    def phase(self, name: str) -> Phase | None:
        """The phase called `name`, when it ran at least once."""
        rec = self.phases.get(name)
        return rec if rec and rec.count else None

    def of_kind(self, kind: str) -> list[Phase]:
        return [p for p in self.phases.values() if p.kind == kind and p.count]

    def first_of_kind(self, kind: str) -> Phase | None:
        """The phase of `kind` with the most steps (profiles may split one kind by batch size)."""
        phases = self.of_kind(kind)
        return max(phases, key=lambda p: p.count) if phases else None

    @property
    def cycles(self) -> int:
        """Speculative cycles: one verify per cycle."""
        verify = self.first_of_kind("verify")
        return int(verify.count) if verify else 0

    def per_cycle_ms(self, name: str) -> float | None:
        rec, n = self.phase(name), self.cycles
        return rec.total_ms / n if rec and n else None

    def per_token_ms(self, total_ms: float) -> float | None:
        return total_ms / self.new_tokens if self.new_tokens else None

    def tokens_per_cycle(self) -> float | None:
        return self.acceptance.tokens_per_cycle() if self.acceptance else None

    def captured_graphs(self) -> set[str]:
        return {c.graph for c in self.collectives if isinstance(c.graph, str)}

    def collective_sizes(self) -> list[int]:
        return sorted({int(c.size_bytes) for c in self.collectives if c.size_bytes})

    def effective_settings(self) -> dict[str, str] | None:
        """The NCCL_* variables every worker had when it created its communicator (the settings in
        force at creation, hence at capture); None when the workers disagree or none reported."""
        envs = [
            nccl_env(w.env_at_comm_init) for w in self.workers if w.env_at_comm_init is not None
        ]
        if not envs:
            return None
        first = envs[0]
        return dict(first) if all(env == first for env in envs[1:]) else None

    def name(self, source: str = "trace") -> str:
        prefix = "" if source == "trace" else "baseline: "
        return f"{prefix}{self.label} {self.mode_text}"

    @property
    def mode_text(self) -> str:
        """The mode as it reads: a profile without speculation is nobody's baseline until a
        speculative run is compared with it ("profile without speculation", not "profile
        baseline" beside a --baseline-profile)."""
        if self.mode == Mode.BASELINE and self.source == "profile":
            return "without speculation"
        return self.mode or "run"


def nccl_env(env: dict | None) -> dict[str, str]:
    return {k: str(v) for k, v in (env or {}).items() if k.startswith("NCCL_")}


@dataclass
class RunSet:
    """The runs one input holds (an engine trace's baseline and speculative runs, a profile's one
    run), with the configuration and inputs they came from; what `load_runs` returns."""

    runs: list[EngineRun] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    kind: str = ""
    inputs: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    traces: list[dict] = field(
        default_factory=list
    )  # engine-trace documents, for the report's engine section
