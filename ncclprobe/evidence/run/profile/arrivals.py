"""Each rank's arrivals at its collectives: from its collective kernels (their start and end, the
host's launch call, the process group and sequence number from the args or the
`record_param_comms` record), or, on a CPU-only profile, from gloo's `gloo:<op>` host ops (gloo runs
the call on its own thread from the rank's arrival to the end of the call, as a kernel runs).
Point-to-point calls, and a peer copy, pair two ranks: not matched. A rank's arrivals and busy
intervals are kept as its `Track`, on the trace's own clock; the alignment shifts them onto one
clock (`clocks`: each base, each host's offset) before it matches calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclprobe.dtypes import ELEMENT_BYTES
from ncclprobe.evidence.run.profile.timeline import Timeline

POINT_TO_POINT = frozenset({"send", "recv", "sendrecv", "peer copy"})


@dataclass(slots=True)
class Arrival:
    start: float  # µs, on the trace's clock (a Track's), on the first rank's once shifted
    end: float
    launch: float | None  # the host's launch call of the kernel (µs, same clock), if recorded
    op: str
    size: int | None
    group: str | None
    seq: int | None


@dataclass
class Track:
    """What the alignment needs of one rank's trace, on the trace's own clock: its arrivals by
    process group (its collective kernels, or on a CPU-only profile its host collective ops: `gpu`
    says which), its GPU's busy intervals, and the clock's base. A reader worker reduces each trace
    to this (`evidence.run.profile_dir`), so many ranks' alignment never holds their timelines,
    and a gloo job read so is aligned by its host ops as one read here is."""

    path: str
    rank: int | None
    base: int | None  # baseTimeNanoseconds
    gpu: bool
    arrivals: dict = field(default_factory=dict)  # group -> [Arrival], unshifted
    busy: list[tuple[float, float]] = field(default_factory=list)


def track_of(tl: Timeline) -> Track:
    base = tl.header.get("baseTimeNanoseconds")
    return Track(
        path=tl.path,
        rank=tl.rank,
        base=base if isinstance(base, int) and not isinstance(base, bool) else None,
        gpu=tl.gpu,
        arrivals=kernel_arrivals(tl) if tl.gpu else host_arrivals(tl),
        busy=busy_intervals(tl) if tl.gpu else [],
    )


def shifted(arrivals: dict, shift: float) -> dict:
    """A rank's arrivals moved onto the common clock (new objects: a Track is never changed)."""
    return {
        group: [
            Arrival(
                a.start + shift,
                a.end + shift,
                a.launch + shift if a.launch is not None else None,
                a.op,
                a.size,
                a.group,
                a.seq,
            )
            for a in items
        ]
        for group, items in arrivals.items()
    }


def kernel_arrivals(tl: Timeline) -> dict[str | None, list[Arrival]]:
    """The rank's collective kernels by process group, in start order, on the trace's clock."""
    hosts = {op.ext: op for op in tl.comm_ops if op.ext is not None}
    out: dict[str | None, list[Arrival]] = {}
    for k in tl.kernels:
        if not k.coll or k.coll["op"] in POINT_TO_POINT:
            continue
        args = k.args or {}
        host = hosts.get(k.ext) if k.ext is not None else None
        group = args.get("group") or (host.group if host else None)
        seq = args.get("seq")
        if seq is None and host is not None:
            seq = host.seq
        dtype = args.get("dtype") or k.coll["dtype"]
        nelems = args.get("nelems")
        size = (
            nelems * ELEMENT_BYTES[dtype] if nelems is not None and dtype in ELEMENT_BYTES else None
        )
        launch = tl.launches.get(k.corr) if k.corr is not None else None
        out.setdefault(group, []).append(
            Arrival(
                start=k.ts,
                end=k.end,
                launch=launch.ts if launch else None,
                op=k.coll["op"],
                size=size,
                group=group,
                seq=seq,
            )
        )
    return out


def host_arrivals(tl: Timeline) -> dict[str | None, list[Arrival]]:
    """A CPU-only profile's collectives from their host ops (`<backend>:<op>`: gloo runs the call
    on its own thread, from the rank's arrival until every rank's data has moved), one group: the
    annotations name none."""
    out: dict[str | None, list[Arrival]] = {}
    for op in sorted(tl.backend_ops, key=lambda o: o.ts):
        if op.op in POINT_TO_POINT or op.op == "barrier":
            continue
        size = (
            op.nelems * ELEMENT_BYTES[op.dtype]
            if op.nelems is not None and op.dtype in ELEMENT_BYTES
            else None
        )
        out.setdefault(None, []).append(
            Arrival(op.ts, op.ts + op.dur, None, op.op, size, None, None)
        )
    return out


def busy_intervals(tl: Timeline) -> list[tuple[float, float]]:
    """The union of the rank's GPU activity as disjoint (start, end) intervals, in order."""
    out: list[list[float]] = []
    for k in tl.kernels:  # sorted by start
        if out and k.ts <= out[-1][1]:
            out[-1][1] = max(out[-1][1], k.end)
        else:
            out.append([k.ts, k.end])
    return [(a, b) for a, b in out]
