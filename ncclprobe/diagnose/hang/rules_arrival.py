"""The rank that comes late to the collectives, from the Flight Recorder's enqueue times.

Every entry of a rank's Flight Recorder records `time_created_ns`: when that rank's host issued
the collective (torch's own clock, the host's wall clock). Collective N of a group is the same call
on every member, so the members' times for N show who came last and by how much; the others wait
that long in it (on gloo the host blocks in the call; on NCCL the kernel spins). A rank that comes
last by more than LATE_FLOOR_MS at SHARE of the late calls or more holds the group up: its host
work before the call (a data loader, a metric, a `.item()`) is where the time goes, not the
collective. Calls are counted, not their lateness summed: one pause of seconds on another rank (a
profiler starting, a checkpoint) must not outweigh a pattern of every step.

The capture's own cost is not the job's: `ncclprobe capture` profiles a few steps of every rank
with Python stacks, and stopping that profiler and writing its trace holds the rank for seconds on
a call-heavy host loop (8.7 s for a 3.2 MB trace on the 2-core machine). Calls whose issue times
overlap a rank's profiler span (its start to its trace written, `injob/<pid>.json` records it) are
left out of the comparison and of its totals, and the finding or the ruled-out line says how many.

What the times cannot show: on NCCL a rank can issue a call on time on the host while its GPU is
still busy with earlier work (then its GPU is late, not its host: a profile shows it); ranks on
several hosts carry their clocks' offset into every difference (said in the finding).
"""

from __future__ import annotations

import statistics

from ncclprobe.diagnose.hang import hang as H
from ncclprobe.evidence import bundle as E
from ncclprobe.findings import Finding, RuledOut

RULE = "late-rank"
HYPOTHESIS = "one rank comes late to the collectives and holds the others up"
LATE_FLOOR_MS = 20.0  # a call is late when its members' issue times spread over this much
MIN_LATE_CALLS = 3  # fewer late calls than this is chance, not a pattern
SHARE = 2 / 3  # the late rank is the last one at no fewer than this share of the late calls


def arrival_findings(ev: E.Evidence) -> list:
    if len(ev.flight_recorder) < 2:
        return []
    hang = H.build(ev.flight_recorder)
    spans = ev.capture.profiler_spans() if ev.capture is not None else {}
    out: list = []
    compared, left_out = 0, Paused()
    for group in hang.groups.values():
        calls, backends = _complete_calls(group)
        calls, paused = _outside_profiler(calls, spans)
        compared += len(calls)
        left_out.add(paused)
        finding = _late_rank(group, calls, backends == {"gloo"}, ev, paused)
        if finding:
            out.append(finding)
    if not out and compared:
        out.append(
            RuledOut(
                rule=RULE,
                hypothesis=HYPOTHESIS,
                reason=f"in {compared} collective call(s) every member recorded, no rank came last "
                f"by more than {LATE_FLOOR_MS:g} ms at {MIN_LATE_CALLS} or more calls (the "
                f"Flight Recorder's issue times){left_out.words()}",
            )
        )
    return out


class Paused:
    """The calls left out because the capture's own profiler ran on one of their ranks."""

    def __init__(self, calls: int = 0, ranks: frozenset[int] = frozenset()):
        self.calls, self.ranks = calls, set(ranks)

    def add(self, other: Paused) -> None:
        self.calls += other.calls
        self.ranks |= other.ranks

    def words(self) -> str:
        if not self.calls:
            return ""
        ranks = ", ".join(map(str, sorted(self.ranks)))
        return (
            f"; {self.calls} call(s) are not counted: they overlap the capture's own profiler on "
            f"rank(s) {ranks} (from its start to its trace written, as injob/<pid>.json records: "
            "a rank late then waited for the capture, not for the job)"
        )


def _outside_profiler(
    calls: list[dict[int, int]], spans: dict[int, list[tuple[float, float]]]
) -> tuple[list[dict[int, int]], Paused]:
    """The calls no member's capture profiler overlaps, and those left out. A call spans its
    first member's issue time to its last's: a profiler that starts, records stacks, stops or
    writes its trace on a member in that time can make that member the late one."""
    kept, paused = [], Paused()
    for times in calls:
        first, last = min(times.values()) / 1e9, max(times.values()) / 1e9
        hit = {
            rank
            for rank in times
            for start, end in spans.get(rank, ())
            if start <= last and end >= first
        }
        if hit:
            paused.calls += 1
            paused.ranks |= hit
        else:
            kept.append(times)
    return kept, paused


def _complete_calls(group: H.Group) -> tuple[list[dict[int, int]], set[str]]:
    """Per sequence number every dumped member holds: each member's issue time (ns); and the
    backends those calls ran on."""
    members = group.dumped
    if len(members) < 2:
        return [], set()
    last = min(group.enqueued.get(r, 0) for r in members)
    calls, backends = [], set()
    for seq in range(group.window_start, last + 1):
        times, used = {}, set()
        for rank in members:
            call = group.call(rank, seq)
            if call is None or not call.first.time_created_ns:
                break
            times[rank] = call.first.time_created_ns
            used.add(call.first.backend)
        else:
            calls.append(times)
            backends |= used
    return calls, backends


def _late_rank(
    group: H.Group,
    calls: list[dict[int, int]],
    host_blocks: bool,
    ev: E.Evidence,
    paused: Paused | None = None,
) -> Finding | None:
    """`host_blocks`: every call compared ran on gloo, whose host blocks in the call."""
    late: dict[int, list[float]] = {}
    for times in calls:
        first, last_rank = min(times.values()), max(times, key=lambda r: times[r])
        spread_ms = (times[last_rank] - first) / 1e6
        if spread_ms >= LATE_FLOOR_MS:
            late.setdefault(last_rank, []).append(spread_ms)
    if not late:
        return None
    total = sum(len(spreads) for spreads in late.values())
    rank, spreads = max(late.items(), key=lambda item: (len(item[1]), sum(item[1])))
    if len(spreads) < MIN_LATE_CALLS or len(spreads) < SHARE * total:
        return None
    median = statistics.median(spreads)
    others = [r for r in group.dumped if r != rank]
    return Finding(
        rule=RULE,
        severity="warning",
        # gloo's host blocks in the call: its issue time is its arrival; NCCL's GPU may come later
        confidence="high" if host_blocks else "medium",
        title=f"rank {rank} comes last to {len(spreads)} of {len(calls)} collectives of "
        f"{group.label}, a median {median:.0f} ms after the first rank: the others wait for it",
        detail=f"The Flight Recorder records when each rank issued each collective. In "
        f"{group.label}, rank {rank} issued {len(spreads)} of the {len(calls)} calls every member "
        f"recorded more than {LATE_FLOOR_MS:g} ms after the first rank (median {median:.0f} ms, "
        f"largest {max(spreads):.0f} ms, {sum(spreads) / 1e3:.2f} s in all): it was the last one "
        f"at {len(spreads)} of the {total} late calls. Rank(s) {', '.join(map(str, others))} "
        f"wait that long in each. The time goes to what rank {rank}'s host does before it "
        "calls (data loading, a metric, a host sync), not to the collective. On NCCL this is the "
        "host's issue time: a GPU still busy with earlier work can be late too (a profile per rank "
        "shows it); ranks on several hosts carry their clocks' offset in these differences"
        f"{(paused or Paused()).words()}.",
        evidence={
            "group": group.label,
            "rank": rank,
            "late_calls": len(spreads),
            "calls": len(calls),
            "median_ms": round(median, 3),
            "largest_ms": round(max(spreads), 3),
            "total_s": round(sum(spreads) / 1e3, 3),
            "late_calls_of_any_rank": total,
            "calls_left_out_for_capture_profiler": (paused or Paused()).calls,
        },
        next_command=_next(rank, ev),
    )


def _next(rank: int, ev: E.Evidence) -> str:
    """Profile the job's steps to see the late rank's host work (with the capture's own command);
    nothing where that rank's profile is already here (its host-call finding reads it)."""
    if any(
        run.source == "profile" and any(r.get("rank") == rank for r in run.ranks) for run in ev.runs
    ):
        return ""
    remark = f"# profile a few steps of every rank to see rank {rank}'s host work before the call"
    if ev.capture is not None and not ev.runs:
        return f"{remark}:\nncclprobe capture --profile 3-6 -- {ev.capture.command}"
    return remark + " (torch.profiler, one trace per rank), then: ncclprobe diagnose --profile DIR"


RULES = (arrival_findings,)
