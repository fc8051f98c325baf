"""One rank's steps grouped into phases, and its collectives, as the normalized view.

Phases group the steps by their label (`step[DECODE]`, `verify`, `burst`); per phase the medians
of the per-step figures of `steps`. Collectives are the NCCL/RCCL kernels of the profile, grouped
by operation, size, dtype, algorithm, protocol and whether they ran eagerly or from a graph:
- an eager kernel carries its size in its args (`In msg nelems` x the dtype's bytes);
- a replayed kernel carries none: its size is taken from the capture when the profile holds the
  capture's host records (every captured call of that operation and dtype had one size), else it
  is unknown and said so;
- algorithm and protocol come from the kernel's name: the kernel NCCL launched, a specialization
  that can run another algorithm or protocol inside it (names.py has the sources), so they are
  reported as the kernel's name says, never as proof of NCCL's choice.
On a CPU-only profile the collectives are the host ops (`record_param_comms`, gloo included),
with their host time.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict

from ncclprobe.dtypes import ELEMENT_BYTES
from ncclprobe.evidence.run.profile.steps import GRAPHED_SHARE, Step, union_us
from ncclprobe.evidence.run.profile.timeline import Timeline
from ncclprobe.evidence.run.view import Collective, Phase
from ncclprobe.stats import quantile

EAGER_SUFFIX = " (kernel by kernel)"


def phases_of(tl: Timeline, steps: list[Step]) -> dict[str, Phase]:
    """Steps grouped by label; a label whose steps ran partly as graph replays and partly kernel by
    kernel (a batch size outside the captured ones, a step kind the engine does not capture) is
    split in two, the eager part named `<label> (kernel by kernel)`: the two are different costs."""
    graphed = {id(s): _graphed(tl, s) for s in steps}
    mixed = {s.label for s in steps if graphed[id(s)]} & {
        s.label for s in steps if graphed[id(s)] is False
    }
    groups: dict[str, list[Step]] = defaultdict(list)
    for step in steps:
        eager = step.label in mixed and graphed[id(step)] is False
        step.label = step.label + EAGER_SUFFIX if eager else step.label
        groups[step.label].append(step)
    return {label: _phase(tl, label, group) for label, group in groups.items()}


def _graphed(tl: Timeline, step: Step) -> bool | None:
    share = step.graph_share(tl.launches)
    return None if share is None else share >= GRAPHED_SHARE


def _phase(tl: Timeline, label: str, steps: list[Step]) -> Phase:
    spans = [s.span_ms() for s in steps]
    busy_of = [(s, b) for s in steps if (b := s.busy_ms()) is not None]  # the steps with kernels
    idle_shares = [(s.span_ms() - b) / s.span_ms() for s, b in busy_of if s.span_ms() > 0]
    graph_spans = [g for g in (_graph_span_ms(tl, s) for s in steps) if g is not None]
    kept = [s.kept for s in steps]
    known_kept = [k for k in kept if k is not None]
    busy = [b for _, b in busy_of]
    measured = [s.graph_share(tl.launches) for s in steps if s.kernels]
    shares = [x for x in measured if x is not None]
    share = statistics.fmean(shares) if shares else None
    kinds = {kind for s in steps for kind in s.launches}
    launches = {
        kind: statistics.median([s.launches.get(kind, 0) for s in steps]) for kind in sorted(kinds)
    }
    tokens = [s.tokens_per_seq for s in steps if s.tokens_per_seq is not None]
    batches = [s.batch for s in steps if s.batch]
    return Phase(
        name=label,
        kind=steps[0].kind,
        count=len(steps),
        total_ms=sum(spans),
        median_ms=statistics.median(spans),
        p90_ms=quantile(spans, 0.9),
        graphed=None if share is None else share >= GRAPHED_SHARE,
        device_ms=statistics.median(busy) if busy else None,
        idle_ms=statistics.median([s.span_ms() - b for s, b in busy_of]) if busy else None,
        graph_share=share,
        launches=launches,
        tokens_per_seq=statistics.median(tokens) if tokens else None,
        batch=max(set(batches), key=batches.count) if batches else None,
        found_by=steps[0].found_by
        + (f"; tokens from {steps[0].tokens_from}" if steps[0].tokens_from else ""),
        idle_share_range=(quantile(idle_shares, 0.1), quantile(idle_shares, 0.9))
        if idle_shares
        else None,
        graph_ms=statistics.median(graph_spans) if graph_spans else None,
        tokens_kept=sum(known_kept) if kept and len(known_kept) == len(kept) else None,
        collective_ms=statistics.median(
            union_us([k for k in s.kernels if k.coll]) / 1000.0 for s in steps if s.kernels
        )
        if busy
        else None,
    )


def _graph_span_ms(tl: Timeline, step: Step) -> float | None:
    """The GPU span of the kernels graph launches issued in the step (None: no replay in it)."""
    replayed = [
        k
        for k in step.kernels
        if k.corr is not None and getattr(tl.launches.get(k.corr), "kind", None) == "graph"
    ]
    if not replayed:
        return None
    return (max(k.end for k in replayed) - min(k.ts for k in replayed)) / 1000.0


def collectives_of(tl: Timeline, steps: list[Step]) -> list[Collective]:
    """Every collective of the profile, grouped (see the module docstring)."""
    if tl.gpu:
        return _kernel_collectives(tl, steps)
    return _host_collectives(tl, steps)


def _phase_of(steps: list[Step]) -> dict[int, str]:
    return {id(k): s.label for s in steps for k in s.kernels}


def _kernel_collectives(tl: Timeline, steps: list[Step]) -> list[Collective]:
    phase = _phase_of(steps)
    captured = _captured_sizes(tl)
    groups: dict[tuple, list] = defaultdict(list)
    for k in tl.kernels:
        if not k.coll:
            continue
        launch = tl.launches.get(k.corr) if k.corr is not None else None
        # no launch record (a trimmed trace): a kernel without the eager metadata nor an External id was replayed
        graph = launch.kind == "graph" if launch else (k.args is None and k.ext is None)
        args = k.args or {}
        dtype = args.get("dtype") or k.coll["dtype"]
        op = args.get("op") or k.coll["op"]
        if args.get("nelems") is not None and dtype in ELEMENT_BYTES:
            size, source = args["nelems"] * ELEMENT_BYTES[dtype], "kernel args"
        elif graph and (op, dtype) in captured:
            size, source = captured[(op, dtype)], "capture"
        else:
            size, source = None, "unknown"
        key = (
            op,
            size,
            dtype,
            graph,
            k.coll["algo"],
            k.coll["proto"],
            phase.get(id(k)),
            args.get("group_size"),
            source,
            k.coll["library"],
        )
        groups[key].append(k)
    return [
        Collective(
            op=op,
            size_bytes=size,
            count=float(len(ks)),
            dtype=dtype,
            phase=ph,
            graph=graph or None,
            group_size=group,
            algo=algo,
            proto=proto,
            time_us=sum(k.dur for k in ks),
            size_source=source,
            library=library,
            calls_us=tuple(k.dur for k in ks),
        )
        for (op, size, dtype, graph, algo, proto, ph, group, source, library), ks in sorted(
            groups.items(), key=str
        )
    ]


def _captured_sizes(tl: Timeline) -> dict[tuple, int]:
    """Sizes of collectives recorded on the host during a graph capture: a `record_param_comms`
    whose External id no kernel carries (nothing ran: it was captured). Kept only where every
    captured call of an operation and dtype had the same size, so the match is unambiguous."""
    launched = {k.ext for k in tl.kernels if k.ext is not None}
    sizes: dict[tuple, set] = defaultdict(set)
    for op in tl.comm_ops:
        if op.ext in launched or op.nelems is None or op.dtype not in ELEMENT_BYTES:
            continue
        sizes[(op.op, op.dtype)].add(op.nelems * ELEMENT_BYTES[op.dtype])
    return {key: next(iter(values)) for key, values in sizes.items() if len(values) == 1}


def _host_collectives(tl: Timeline, steps: list[Step]) -> list[Collective]:
    """A CPU-only profile's collectives: torch's `<backend>:<op>` annotations (their duration is the
    collective's work, on gloo's thread), else the `record_param_comms` host records."""
    ordered = sorted(steps, key=lambda s: s.t0)
    starts = [s.t0 for s in ordered]
    groups: dict[tuple, list] = defaultdict(list)
    group_size = tl.world_size
    for op in tl.backend_ops or tl.comm_ops:
        if op.op == "barrier":
            continue
        at = bisect.bisect_right(starts, op.ts) - 1
        label = ordered[at].label if at >= 0 and op.ts <= ordered[at].t1 + op.dur else None
        size = (
            op.nelems * ELEMENT_BYTES[op.dtype]
            if op.nelems is not None and op.dtype in ELEMENT_BYTES
            else None
        )
        library = op.backend or tl.distributed.get("backend")
        groups[(op.op, size, op.dtype, label, op.group_size or group_size, library)].append(op)
    return [
        Collective(
            op=op,
            size_bytes=size,
            count=float(len(ops)),
            dtype=dtype,
            phase=label,
            graph=None,
            group_size=group,
            time_us=sum(o.dur for o in ops),
            size_source="host op" if size is not None else "unknown",
            library=library,
            calls_us=tuple(o.dur for o in ops),
        )
        for (op, size, dtype, label, group, library), ops in sorted(groups.items(), key=str)
    ]


def collective_share(tl: Timeline, steps: list[Step]) -> float | None:
    """NCCL/RCCL kernel time inside the steps over the steps' GPU span; on a CPU-only profile the
    collectives' own time (gloo's work) over the steps' host time."""
    if not steps:
        return None
    if not tl.gpu:
        host = sum(s.host_ms for s in steps)
        coll = sum(c.time_us or 0.0 for c in _host_collectives(tl, steps) if c.phase) / 1000.0
        return min(1.0, coll / host) if host and tl.backend_ops else None
    spans = sum(s.span_ms() for s in steps if s.kernels)
    coll = sum(union_us([k for k in s.kernels if k.coll]) for s in steps) / 1000.0
    return min(1.0, coll / spans) if spans else None


def graph_coverage(tl: Timeline, steps: list[Step]) -> float | None:
    """The share of the steps' GPU span whose kernels a graph launch issued."""
    if not tl.gpu or not steps:
        return None
    spans = [(s.span_ms(), s.graph_share(tl.launches)) for s in steps if s.kernels]
    total = sum(span for span, _ in spans)
    return sum(span * (share or 0.0) for span, share in spans) / total if total else None
