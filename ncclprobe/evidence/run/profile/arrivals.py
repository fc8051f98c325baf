"""Each rank's arrivals at its collectives, on one clock: from its collective kernels (their start
and end, the host's launch call, the process group and sequence number from the args or the
`record_param_comms` record), or, on a CPU-only profile, from gloo's `gloo:<op>` host ops (gloo runs
the call on its own thread from the rank's arrival to the end of the call, as a kernel runs). The
clock: each rank shifted by its `baseTimeNanoseconds`' difference from the first rank's
(`align`'s docstring). Point-to-point calls, and a peer copy, pair two ranks: not matched.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncclprobe.dtypes import ELEMENT_BYTES
from ncclprobe.evidence.run.profile.timeline import Timeline

POINT_TO_POINT = frozenset({"send", "recv", "sendrecv", "peer copy"})


@dataclass(slots=True)
class Arrival:
    start: float  # µs, on the first rank's clock
    end: float
    launch: float | None  # the host's launch call of the kernel (µs, same clock), if recorded
    op: str
    size: int | None
    group: str | None
    seq: int | None


def clock(timelines: list[Timeline]) -> tuple[list[float], str, str]:
    """Per rank the shift (µs) onto the first rank's clock, the words, and how far to trust it."""
    bases = [tl.header.get("baseTimeNanoseconds") for tl in timelines]
    known = [b if isinstance(b, int) and not isinstance(b, bool) else None for b in bases]
    missing = [
        tl.rank if tl.rank is not None else i
        for i, (tl, b) in enumerate(zip(timelines, known))
        if b is None
    ]
    ref = next((b for b in known if b is not None), None)
    shifts = [(b - ref) / 1000.0 if b is not None and ref is not None else 0.0 for b in known]
    if ref is None:
        return (
            shifts,
            "no profile records baseTimeNanoseconds: the ranks' timestamps are compared as they "
            "are, which holds for ranks of one host and fails across hosts",
            "medium",
        )
    if missing:
        return (
            shifts,
            f"rank(s) {', '.join(map(str, missing))} record no baseTimeNanoseconds: their "
            "timestamps are taken as on the others' clock, unverified",
            "low",
        )
    if len(set(known)) == 1:
        words = "every profile records the same baseTimeNanoseconds: one clock, no shift"
    else:
        words = "shifted by the difference of each profile's baseTimeNanoseconds"
    return (
        shifts,
        words + " (ranks on several hosts carry their clocks' offset into every wait)",
        "high",
    )


def kernel_arrivals(tl: Timeline, shift: float) -> dict[str | None, list[Arrival]]:
    """The rank's collective kernels by process group, in start order, on the common clock."""
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
                start=k.ts + shift,
                end=k.end + shift,
                launch=launch.ts + shift if launch else None,
                op=k.coll["op"],
                size=size,
                group=group,
                seq=seq,
            )
        )
    return out


def host_arrivals(tl: Timeline, shift: float) -> dict[str | None, list[Arrival]]:
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
            Arrival(op.ts + shift, op.ts + op.dur + shift, None, op.op, size, None, None)
        )
    return out
