"""Find the steps of one rank's timeline and measure each one.

Steps come from the engine's own annotations where the profile has them (SGLang, vLLM,
ncclprobe; names.step_annotation), else from torch.profiler's `ProfilerStep#N`, else from the
gaps between bursts of GPU work (a step ends where the GPU waits noticeably longer than it does
between the kernels of one step). A step's GPU work is every kernel launched while the step's
annotation was open (a kernel's correlation id names its launch call), so work the GPU runs later,
asynchronously, still counts for the step that issued it.

Per step (docs/METRICS.md "Profiles"):
- `span_ms`: from the start of the step's first kernel to the end of its last, on the GPU: the
  time the GPU needed for the step, the gaps it waited for launches included (on a CPU-only
  profile: the annotation's host time);
- `busy_ms`: the union of its kernels' intervals (several streams counted once); `idle_ms` =
  span − busy: the GPU waited inside the step, for the host;
- `host_ms`: the annotation's own duration, the host's time in the step;
- `launches`: launch calls by kind (kernel, graph, memcpy, sync) made inside the step;
- `graph_share`: the share of its kernel time whose kernels a graph launch issued.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ncclprobe.evidence.run.profile.timeline import Kernel, Timeline

GAP_FACTOR = 20.0  # a gap this many times the median kernel-to-kernel gap ends a step
MIN_STEP_GAP_US = 100.0
GRAPHED_SHARE = 0.5  # a step whose kernel time is mostly graph-launched is a graph replay


@dataclass
class Step:
    kind: str
    label: str
    t0: float  # host window (µs)
    t1: float
    batch: int | None = None
    tokens_per_seq: float | None = None
    engine: str = "unknown"
    found_by: str = ""
    kernels: list[Kernel] = field(default_factory=list)
    launches: dict = field(default_factory=dict)

    @property
    def host_ms(self) -> float:
        return (self.t1 - self.t0) / 1000.0

    @property
    def gpu(self) -> list[Kernel]:
        return self.kernels

    def span_ms(self) -> float:
        if not self.kernels:
            return self.host_ms
        return (max(k.end for k in self.kernels) - min(k.ts for k in self.kernels)) / 1000.0

    def busy_ms(self) -> float | None:
        return union_us(self.kernels) / 1000.0 if self.kernels else None

    def graph_share(self, launches) -> float | None:
        total = sum(k.dur for k in self.kernels)
        if not total:
            return None
        graphed = sum(k.dur for k in self.kernels if _launch_kind(launches, k) == "graph")
        return graphed / total


def union_us(kernels: list[Kernel]) -> float:
    """Time covered by at least one of the intervals (overlapping streams counted once)."""
    total, end = 0.0, float("-inf")
    for k in sorted(kernels, key=lambda k: k.ts):
        if k.ts >= end:
            total += k.dur
            end = k.end
        elif k.end > end:
            total += k.end - end
            end = k.end
    return total


def _launch_kind(launches, kernel: Kernel) -> str | None:
    launch = launches.get(kernel.corr) if kernel.corr is not None else None
    return launch.kind if launch else None


def find_steps(tl: Timeline) -> tuple[list[Step], str]:
    """The steps, and how they were found (said in the output)."""
    steps = _annotated(tl)
    how = steps[0].found_by if steps else ""
    if not steps:
        steps = _profiler_steps(tl)
        how = "torch.profiler's ProfilerStep#N annotations" if steps else ""
    if not steps and tl.gpu:
        steps = _from_gaps(tl)
        how = (
            "gaps between bursts of GPU work (the profile has no step annotations)" if steps else ""
        )
    _attach(tl, steps)
    _shape_tokens(tl, steps)
    return steps, how


def _annotated(tl: Timeline) -> list[Step]:
    by_engine: dict[str, list] = {}
    for a in tl.annotations:
        if a.step:
            by_engine.setdefault(a.step["engine"], []).append(a)
    for engine in ("ncclprobe", "sglang", "vllm"):  # the most specific annotation family wins
        if by_engine.get(engine):
            return [
                Step(
                    kind=a.step["kind"],
                    label=a.step["label"],
                    t0=a.ts,
                    t1=a.ts + a.dur,
                    batch=a.step["batch"],
                    tokens_per_seq=a.step["tokens_per_seq"],
                    engine=engine,
                    found_by=a.step["found_by"],
                )
                for a in by_engine[engine]
            ]
    return []


def _profiler_steps(tl: Timeline) -> list[Step]:
    return [
        Step(
            kind="other",
            label="ProfilerStep",
            t0=a.ts,
            t1=a.ts + a.dur,
            engine="torch",
            found_by="torch.profiler's ProfilerStep#N annotations",
        )
        for a in tl.annotations
        if a.profiler_step is not None
    ]


def _from_gaps(tl: Timeline) -> list[Step]:
    """Bursts of GPU work separated by idle gaps much longer than the gaps inside a burst."""
    kernels = tl.kernels
    gaps = [b.ts - a.end for a, b in zip(kernels, kernels[1:])]
    positive = sorted(g for g in gaps if g > 0)
    if not positive:
        return []
    threshold = max(MIN_STEP_GAP_US, GAP_FACTOR * positive[len(positive) // 2])
    bursts, start = [], 0
    for i, gap in enumerate(gaps):
        if gap > threshold:
            bursts.append(kernels[start : i + 1])
            start = i + 1
    bursts.append(kernels[start:])
    steps = []
    for burst in bursts:
        launch_ts = [tl.launches[k.corr].ts for k in burst if k.corr in tl.launches]
        t0 = min(launch_ts) if launch_ts else burst[0].ts
        t1 = max(launch_ts) if launch_ts else burst[-1].end
        steps.append(
            Step(
                kind="other",
                label="burst",
                t0=t0,
                t1=t1,
                engine="unknown",
                found_by="gaps between bursts of GPU work (the profile has no step annotations)",
            )
        )
    return steps


def _attach(tl: Timeline, steps: list[Step]) -> None:
    """Give each step the kernels launched inside its host window and its launch counts."""
    if not steps:
        return
    order = sorted(range(len(steps)), key=lambda i: steps[i].t0)
    starts = [steps[i].t0 for i in order]

    def owner(ts: float) -> Step | None:
        """The latest-starting step open at `ts` (a nested annotation before its parent)."""
        at = bisect.bisect_right(starts, ts) - 1
        for j in range(at, max(-1, at - 4), -1):
            step = steps[order[j]]
            if step.t0 <= ts <= step.t1:
                return step
        return None

    for launch in tl.launches.values():
        step = owner(launch.ts)
        if step is not None:
            step.launches[launch.kind] = step.launches.get(launch.kind, 0) + 1
    for kernel in tl.kernels:
        launch = tl.launches.get(kernel.corr) if kernel.corr is not None else None
        step = owner(launch.ts if launch else kernel.ts)
        if step is not None:
            step.kernels.append(kernel)


def _shape_tokens(tl: Timeline, steps: list[Step]) -> None:
    """Tokens per sequence from the recorded input shapes (record_shapes): the embedding lookups
    inside a step give its token ids' shapes, [batch, tokens] or a flat [tokens] over the batch.
    The largest wins: a speculative step holds a draft's 1-token lookups and the verify's k+1, and
    it is the verify that tells it from a plain decode step (SGLang schedules both as DECODE)."""
    if not tl.embeddings:
        return
    times = [ts for ts, _ in tl.embeddings]
    for step in steps:
        if step.tokens_per_seq is not None:
            continue
        lo, hi = bisect.bisect_left(times, step.t0), bisect.bisect_right(times, step.t1)
        found = [_tokens(dims, step.batch) for _, dims in tl.embeddings[lo:hi]]
        found = [f for f in found if f is not None]
        if not found:
            continue
        batch, per_seq = max(found, key=lambda f: f[1])
        step.batch, step.tokens_per_seq = step.batch or batch, per_seq
        if step.kind == "other" or (step.kind == "decode" and per_seq > 1.0):
            old, step.kind = step.kind, kind_from_tokens(per_seq)
            step.label = (
                step.kind
                if old == "other"
                else f"{step.label} ({per_seq:g} tokens/seq: speculative)"
            )
            step.found_by += "; decode or verify from the recorded input shapes"


def _tokens(dims: list, batch: int | None) -> tuple[int | None, float] | None:
    if len(dims) == 2 and all(isinstance(d, int) for d in dims) and dims[0] > 0:
        return dims[0], float(dims[1])
    if len(dims) == 1 and isinstance(dims[0], int) and batch:
        return batch, dims[0] / batch
    return None


def kind_from_tokens(tokens_per_seq: float) -> str:
    """1 token per sequence: decode; a few (a speculative verify of k+1): verify; many: prefill."""
    if tokens_per_seq <= 1.0:
        return "decode"
    return "verify" if tokens_per_seq <= 16 else "prefill"
