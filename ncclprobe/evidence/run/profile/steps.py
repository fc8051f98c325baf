"""Find the steps of one rank's timeline and measure each one.

Steps come from the engine's own annotations where the profile has them (SGLang, vLLM,
ncclprobe; names.step_annotation), else from torch.profiler's `ProfilerStep#N`, else from the
kernel stream itself, one step per forward pass (`forwards`; what each is: `kinds`), else from
the gaps between bursts of GPU work (a step ends where the GPU waits noticeably longer than it
does between the kernels of one step). A step's GPU work is every kernel launched while the step's
host window was open (a kernel's correlation id names its launch call), so work the GPU runs
later, asynchronously, still counts for the step that issued it.

Per step (docs/METRICS.md "Profiles"):
- `span_ms`: from the start of the step's first kernel to the end of its last, on the GPU: the
  time the GPU needed for the step, the gaps it waited for launches included; a forward found
  from the kernel stream runs on to the next forward's first kernel, so the steps tile the run
  (on a CPU-only profile: the annotation's host time);
- `busy_ms`: the union of its kernels' intervals (several streams counted once); `idle_ms` =
  span − busy: the GPU waited inside the step, for the host;
- `host_ms`: the annotation's own duration, the host's time in the step;
- `launches`: launch calls by kind (kernel, graph, memcpy, sync) made inside the step;
- `graph_share`: the share of its kernel time whose kernels a graph launch issued.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ncclprobe.evidence.run.profile import forwards as F
from ncclprobe.evidence.run.profile import kinds as K
from ncclprobe.evidence.run.profile.timeline import Kernel, Launch, Timeline

GAP_FACTOR = 20.0  # a gap this many times the median kernel-to-kernel gap ends a step
MIN_STEP_GAP_US = 100.0
GRAPHED_SHARE = 0.5  # a step whose kernel time is mostly graph-launched is a graph replay
WHOLE_LAST = 0.85  # a last forward with less of its kind's recurring kernels was cut off


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
    # forwards found from the kernel stream (forwards, kinds):
    gpu_end: float | None = None  # the next forward's first kernel: the steps tile the run
    model: str = ""  # target | draft
    replay: bool = False  # a graph replay of the whole forward
    launch_count: int = 0  # kernel launches (a graph replay's kernels included)
    signature: tuple = ()  # its first launches' kernel names (ids): forwards of one kind share it
    blocks: dict = field(default_factory=dict)  # kernel name -> median launch blocks
    tokens_from: str = ""
    kept: float | None = None  # tokens the target kept (None: unknown)

    @property
    def host_ms(self) -> float:
        return (self.t1 - self.t0) / 1000.0

    @property
    def gpu(self) -> list[Kernel]:
        return self.kernels

    def span_ms(self) -> float:
        if not self.kernels:
            return self.host_ms
        start = min(k.ts for k in self.kernels)
        end = max(k.end for k in self.kernels)
        return (max(end, self.gpu_end or end) - start) / 1000.0

    def busy_ms(self) -> float | None:
        return union_us(self.kernels) / 1000.0 if self.kernels else None

    def graph_share(self, launches: dict[int, Launch]) -> float | None:
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


def _launch_kind(launches: dict[int, Launch], kernel: Kernel) -> str | None:
    launch = launches.get(kernel.corr) if kernel.corr is not None else None
    return launch.kind if launch else None


def find_steps(tl: Timeline) -> tuple[list[Step], str]:
    """The steps, and how they were found (said in the output)."""
    steps = _annotated(tl)
    how = steps[0].found_by if steps else ""
    if not steps:
        steps = _profiler_steps(tl)
        how = "torch.profiler's ProfilerStep#N annotations" if steps else ""
        forwards = _from_forwards(tl) if steps and tl.gpu else []
        if _wrap_several(steps, forwards):
            steps = forwards
            how = (
                f"{forwards[0].found_by} (torch.profiler's ProfilerStep#N annotations each held "
                "several forwards: a profiler schedule's step, not the engine's)"
            )
    if not steps and tl.gpu:
        steps = _from_forwards(tl)
        how = steps[0].found_by if steps else ""
    if not steps and tl.gpu:
        steps = _from_gaps(tl)
        how = (
            "gaps between bursts of GPU work (the profile has no step annotations)" if steps else ""
        )
    _attach(tl, steps)
    if steps and steps[0].found_by.startswith("the kernel stream"):
        _finish_forwards(tl, steps)
    else:
        _shape_tokens(tl, steps)
        for step in steps:  # an annotated decode or prefill step keeps one token per sequence
            step.kept = 1.0 if step.kind in ("decode", "prefill") else None
    return steps, how


def _wrap_several(annotated: list[Step], forwards: list[Step]) -> bool:
    """Whether a `ProfilerStep#N` held two or more of a language model's forwards: a profiler
    schedule stepped once per several tokens (`prof.step()` every N tokens, or around a whole
    `generate()`), so its steps are not the tokens'. Forwards found only from repeated kernels
    (no token lookup, no replay) do not count: a training step's forward and backward repeat too."""
    if not annotated or not forwards or not forwards[0].model:
        return False
    windows = sorted((a.t0, a.t1) for a in annotated)
    starts = [w[0] for w in windows]
    held = [0] * len(windows)
    for fw in forwards:
        at = bisect.bisect_right(starts, fw.t0) - 1
        if at >= 0 and fw.t0 <= windows[at][1]:
            held[at] += 1
    return max(held) >= 2


def bounds(tl: Timeline, steps: list[Step]) -> list[dict]:
    """Each step's host window, its last launch and its GPU span (µs, the trace's clock) with its
    label: what a cross-rank analysis aligns (a late rank's host work shows between one step's
    last launch and the next step's start)."""
    out = []
    for s in steps:
        gpu = [k.ts for k in s.kernels]
        launched = [tl.launches[k.corr].ts for k in s.kernels if k.corr in tl.launches]
        out.append(
            {
                "label": s.label,
                "kind": s.kind,
                "host_us": (s.t0, s.t1),
                "last_launch_us": max(launched) if launched else None,
                "gpu_us": (min(gpu), min(gpu) + s.span_ms() * 1000.0) if gpu else None,
            }
        )
    return out


def _from_forwards(tl: Timeline) -> list[Step]:
    """One step per forward pass found in the kernel stream (forwards.py), up to the next one."""
    units = F.units_of(tl)
    found = F.find_forwards(tl, units)
    steps = []
    for fw in found:
        last = fw.end if fw.end < len(units) else len(units) - 1
        kinds = units.kind[fw.start : fw.end]
        sizes = units.sizes[fw.start : fw.end]
        steps.append(
            Step(
                kind="other",
                label="forward",
                t0=units.ts[fw.start],
                t1=units.ts[last],
                engine="unknown",
                found_by=f"the kernel stream: {fw.found_by}",
                model="target" if fw.lm else "",
                replay=any(k == "graph" and n >= F.MIN_GRAPH_KERNELS for k, n in zip(kinds, sizes)),
                launch_count=_forward_kernels(kinds, sizes),
                signature=tuple(units.tokens[fw.start : fw.start + F.KGRAM]),
            )
        )
    return steps


def _forward_kernels(kinds: list[str], sizes: list[int]) -> int:
    """The kernels of a forward: its graph replay's when it has one (the glue around it aside),
    else every kernel launched."""
    replayed = [n for k, n in zip(kinds, sizes) if k == "graph" and n >= F.MIN_GRAPH_KERNELS]
    return sum(replayed) if replayed else sum(n for k, n in zip(kinds, sizes) if k != "sync")


def _finish_forwards(tl: Timeline, steps: list[Step]) -> None:
    """Drop a last forward cut off by the end of the profile, tile the GPU timeline, classify."""
    if _cut_off(steps):
        steps.pop()
    starts = [min((k.ts for k in s.kernels), default=None) for s in steps]
    for step, following in zip(steps, starts[1:]):
        step.gpu_end = following
    if not steps[0].model:
        # a repeated unit with no token lookup: not known to be a model's forward ("repeated steps
        # wait for the host", never "step steps")
        for step in steps:
            step.label = "repeated"
        return
    for step in steps:
        step.blocks = K.blocks_by_name(step.kernels, tl.launches, step.replay)
    K.classify(tl, steps)


def _cut_off(steps: list[Step]) -> bool:
    """Whether the last forward was cut by the end of the profile: it holds less than WHOLE_LAST of
    the kernels its kind (the forwards that start like it) launched at least twice in every forward
    (the layers': the glue after a forward varies, its layers do not). A graph replay is whole."""
    last = steps[-1]
    alike = [_counts(s) for s in steps[:-1] if s.signature == last.signature]
    if last.replay or not alike:
        return False
    fewest = {n: min(c.get(n, 0) for c in alike) for n in alike[0]}
    recurring = {n: m for n, m in fewest.items() if m >= 2}
    if not recurring:
        return False
    have = _counts(last)
    kept = sum(min(have.get(n, 0), m) for n, m in recurring.items())
    return kept < WHOLE_LAST * sum(recurring.values())


def _counts(step: Step) -> dict[str, int]:
    counts: dict[str, int] = {}
    for k in step.kernels:
        if k.category == "kernel":
            counts[k.name] = counts.get(k.name, 0) + 1
    return counts


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
        made_by = tl.launches.get(kernel.corr) if kernel.corr is not None else None
        step = owner(made_by.ts if made_by else kernel.ts)
        if step is not None:
            step.kernels.append(kernel)


def _shape_tokens(tl: Timeline, steps: list[Step]) -> None:
    """Tokens per sequence from the recorded input shapes (record_shapes): the embedding lookups
    inside a step give its token ids' shapes, [batch, tokens] or a flat [tokens] over the batch.
    The largest wins: a speculative step holds a draft's 1-token lookups and the verify's k+1, and
    it is the verify that tells it from a plain decode step (SGLang schedules both as DECODE)."""
    if not tl.embeddings:
        return
    times = [ts for ts, _, _ in tl.embeddings]
    for step in steps:
        if step.tokens_per_seq is not None:
            continue
        lo, hi = bisect.bisect_left(times, step.t0), bisect.bisect_right(times, step.t1)
        looked = [K.lookup_tokens(dims, step.batch) for _, _, dims in tl.embeddings[lo:hi] if dims]
        found = [f for f in looked if f is not None]
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


def kind_from_tokens(tokens_per_seq: float) -> str:
    """1 token per sequence: decode; a few (a speculative verify of k+1): verify; many: prefill."""
    if tokens_per_seq <= 1.0:
        return "decode"
    return "verify" if tokens_per_seq <= K.MAX_VERIFY_TOKENS else "prefill"
