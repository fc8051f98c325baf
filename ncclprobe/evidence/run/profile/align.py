"""Several ranks' collectives matched call by call: when each rank arrived, who waited, what moved.

A collective kernel runs from its own rank's arrival until the data of every rank has moved, so on
a rank that arrives early its duration is waiting plus transfer (docs/METRICS.md "Profiles"). Per
matched call, on one clock:
- each rank's kernel start and end; the **last start** (the moment every rank is in);
- a rank's **wait** = last start − its start; its **transfer** = its end − last start (its kernel
  time is exactly the two; a rank that ended before the last one started, through a clock offset,
  counts as transfer 0 and is counted in `early_ends`);
- the call's **spread** = last start − first start: how long the earliest rank was held up.

Clock: Kineto writes `ts` in µs from the trace's `baseTimeNanoseconds` (ts · 1000 + base is the
host's wall clock in ns, as torch's profiler tests recover it). Each rank is shifted by its base's
difference from the first rank's, computed in integer ns so no precision is lost. Ranks of one
host read one clock (checked on the H200 fixtures: tests/test_profile_ranks.py); ranks on several
hosts carry the offset between their hosts' clocks into every wait. Without a base the rank's `ts`
are taken as they are, and said so.

Clocks: `clocks.py` (each base, then each host's offset from the collectives' end times). Arrivals:
`arrivals.py` (each rank's collective kernels, or on a CPU-only profile its host collective ops,
reduced to a `Track`, in this process or in a reader worker).

Matching (linear in the kernels), per process group (`Process Group Name` in the eager kernel's args
or its `record_param_comms`; graph replays carry none: one unnamed group):
- by sequence number where every kernel of the group has one (`Seq`, newer torch); `Ev Idx` is not
  one: it is the profiler's event index, which differs between ranks as soon as their host work does;
- else by order within the group: the ranks' next kernels are one call when their names agree (the
  operation) and, where both are known, their sizes; for the operations in which no rank can finish
  before every rank started (all-reduce, all-gather, reduce-scatter, all-to-all) their intervals
  must also overlap, else the one that ended first has no partner (a window that began earlier) and
  is skipped. Point-to-point kernels pair two ranks, not the group, and are not matched.
Each group's first matched call is kept apart (`opening`): it is where the ranks' profiling windows
meet, and waits for the rank whose profiler started last.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field

from ncclprobe.evidence.run.profile.arrivals import Arrival, Track, shifted, track_of
from ncclprobe.evidence.run.profile.clocks import end_offset, host_offsets, hosts_of, rank_shifts

# the clocks' and the arrivals' names, where the alignment's users look
__all__ = ["Arrival", "Track", "end_offset", "hosts_of", "track_of"]

# ncclprobe's names of the collectives (`ncclprobe.nccl.names`), as the kernel names map to them
OVERLAPPING_OPS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "alltoall"})
LATE_FACTOR = 2.0  # a call is late when its spread is over twice the median call's ...
LATE_FLOOR_US = 10.0  # ... and over 10 µs (launch jitter on a healthy node)
MIN_MATCHED = 0.5  # order matching that pairs fewer of the calls than this gave up on the clocks
BY_SEQ = "sequence numbers (`Seq`) within each process group"
BY_ORDER = (
    "order within each process group, checked by operation, size and the kernels' overlap in time"
)
BY_ORDER_ONLY = (
    "order within each process group alone: the ranks' kernels do not overlap in time, so their "
    "clocks disagree or their windows differ"
)


@dataclass(slots=True)
class Call:
    op: str
    group: str | None
    size_bytes: int | None
    members: tuple[int, ...]  # positions in Alignment.ranks
    arrivals: tuple[Arrival, ...]

    @property
    def last_start(self) -> float:
        return max(a.start for a in self.arrivals)

    @property
    def first_start(self) -> float:
        return min(a.start for a in self.arrivals)

    @property
    def spread(self) -> float:
        return self.last_start - self.first_start

    @property
    def last(self) -> int:
        """The position of the rank that arrived last."""
        at = max(range(len(self.arrivals)), key=lambda i: self.arrivals[i].start)
        return self.members[at]

    def wait(self, i: int) -> float:
        return self.last_start - self.arrivals[i].start

    @property
    def moved(self) -> float:
        """From the last arrival to the last end: the time the data moved once every rank was in
        (the per-call time a baseline comparison reads, diagnose.run.rules_collective_baseline)."""
        return max(0.0, max(a.end for a in self.arrivals) - self.last_start)

    def transfer(self, i: int) -> float:
        return max(0.0, self.arrivals[i].end - self.last_start)


@dataclass
class RankTotals:
    rank: int
    calls: int = 0
    last: int = 0  # calls it arrived last at
    wait_us: float = 0.0
    transfer_us: float = 0.0
    early_ends: int = 0  # calls it ended before the last rank started (a clock offset)

    @property
    def wait_share(self) -> float | None:
        """The share of its collective kernel time spent waiting for the others."""
        total = self.wait_us + self.transfer_us
        return self.wait_us / total if total else None


@dataclass
class Lateness:
    """The calls a rank held up: late calls (spread over LATE_FACTOR × the median spread and over
    LATE_FLOOR_US) at which it arrived last, and where its time went before each of them."""

    rank: int
    calls: int  # late calls it arrived last at
    excess_us: float  # Σ (spread − median spread) over them: what the others would not have waited
    median_spread_us: float | None
    largest_us: float | None
    own_kernels_us: float = 0.0  # its GPU ran its own kernels between the first arrival and its own
    idle_us: float = 0.0  # its GPU ran nothing of its own then: the host was late (a host gap)
    launch_late_us: float | None = None  # median: its host's launch call after the first arrival
    # set by `always_last`: the chance of arriving last this often were every rank equally likely;
    # its calls are then every call it arrived last at, its excess the margins over the next-latest
    chance: float | None = None


@dataclass
class Alignment:
    ranks: list[int]  # the ranks, in the order of the profiles given
    method: str
    clock: str  # how the clocks were aligned, in words
    clock_confidence: str  # high | medium | low
    calls: list[Call] = field(default_factory=list)  # every matched call but each group's first
    opening: list[Call] = field(default_factory=list)  # each group's first call (see `align`)
    unmatched: dict[int, int] = field(default_factory=dict)  # rank -> collective kernels not paired
    mismatched: int = 0  # heads that overlapped but disagreed in operation or size (dropped)
    typical_spread_us: float | None = None
    # True: CPU-only profiles, matched by their host collective ops (gloo's `gloo:all_reduce`, whose
    # span on gloo's thread runs from the rank's arrival to the end of the call, as a kernel's does)
    on_host: bool = False
    clock_shifts_us: dict[int, float] = field(default_factory=dict)  # rank -> offset taken off
    sampled: str | None = None  # how the ranks were chosen when not every rank was aligned
    _timelines: list = field(default_factory=list, repr=False)  # as given: Timeline or Track
    _tracks: list[Track] = field(default_factory=list, repr=False)
    _shifts: list[float] = field(default_factory=list, repr=False)

    @property
    def window_us(self) -> float:
        """From the first arrival at the first matched call to the end of the last call."""
        if not self.calls:
            return 0.0
        return max(a.end for a in self.calls[-1].arrivals) - self.calls[0].first_start

    def totals(self) -> list[RankTotals]:
        out = [RankTotals(rank) for rank in self.ranks]
        for call in self.calls:
            out[call.last].last += 1
            for i, pos in enumerate(call.members):
                row = out[pos]
                row.calls += 1
                row.wait_us += call.wait(i)
                row.transfer_us += call.transfer(i)
                row.early_ends += call.arrivals[i].end < call.last_start
        return out

    def late_calls(self) -> list[Call]:
        typical = self.typical_spread_us or 0.0
        cut = max(LATE_FACTOR * typical, LATE_FLOOR_US)
        return [c for c in self.calls if c.spread > cut]

    def lateness(self) -> list[Lateness]:
        """Per rank, the late calls it arrived last at; most excess first."""
        typical = self.typical_spread_us or 0.0
        by_rank: dict[int, list[Call]] = {pos: [] for pos in range(len(self.ranks))}
        for call in self.late_calls():
            by_rank[call.last].append(call)
        out = []
        for pos, calls in by_rank.items():
            spreads = [c.spread for c in calls]
            row = Lateness(
                rank=self.ranks[pos],
                calls=len(calls),
                excess_us=sum(s - typical for s in spreads),
                median_spread_us=statistics.median(spreads) if spreads else None,
                largest_us=max(spreads) if spreads else None,
            )
            if calls:
                self._where_time_went(pos, calls, row)
            out.append(row)
        return sorted(out, key=lambda r: -r.excess_us)

    def always_last(self) -> tuple[Lateness, float] | None:
        """The rank that arrives last most often, as a Lateness over the calls it arrived last at
        (its excess: how long after the next-latest rank it came, which is what the others would
        not have waited had it come with that rank), and the chance of arriving last that often
        were every rank equally likely to (binomial, 1 in the call's ranks); None without calls.
        A rank late before every call makes every call's spread its delay, so the late calls of
        `lateness` (over LATE_FACTOR x the median spread) miss it: this finds it by who comes last."""
        if not self.calls:
            return None
        counts: dict[int, list[Call]] = {}
        for call in self.calls:
            counts.setdefault(call.last, []).append(call)
        pos, calls = max(counts.items(), key=lambda kv: len(kv[1]))
        margins = [_margin(c) for c in calls]
        row = Lateness(
            rank=self.ranks[pos],
            calls=len(calls),
            excess_us=sum(margins),
            median_spread_us=statistics.median(margins),
            largest_us=max(margins),
        )
        self._where_time_went(pos, calls, row)
        members = statistics.median(len(c.members) for c in self.calls)
        row.chance = _binomial_tail(len(self.calls), len(calls), 1.0 / members)
        return row, row.chance

    def _where_time_went(self, pos: int, calls: list[Call], row: Lateness) -> None:
        """Between the first rank's arrival and its own: its GPU's own kernels, or nothing (idle);
        on the host alone (`on_host`) not known: the profile keeps no GPU work to split it by."""
        if self.on_host:
            return
        item = self._tracks[pos] if self._tracks else self._timelines[pos]
        track = item if isinstance(item, Track) else track_of(item)
        shift = self._shifts[pos]
        busy = [(a + shift, b + shift) for a, b in track.busy]
        starts = [b[0] for b in busy]
        launches = []
        for call in calls:
            mine = call.arrivals[call.members.index(pos)]
            lo, hi = call.first_start, mine.start
            own = _covered(busy, starts, lo, hi)
            row.own_kernels_us += own
            row.idle_us += (hi - lo) - own
            if mine.launch is not None:
                launches.append(mine.launch - lo)
        row.launch_late_us = statistics.median(launches) if launches else None


def align(timelines: list) -> Alignment | None:
    """The ranks' collective calls matched (module docstring); None with fewer than two ranks or
    no collective kernel (nor, on CPU-only profiles, host collective op) to match. Each item is a
    Timeline or the Track a reader worker made of one; either way each host's clock offset is
    taken off before matching."""
    tracks = [t if isinstance(t, Track) else track_of(t) for t in timelines]
    if len(tracks) < 2:
        return None
    on_host = not any(t.gpu for t in tracks)
    if not on_host and not all(t.gpu for t in tracks):
        return None
    ranks = [t.rank if t.rank is not None else i for i, t in enumerate(tracks)]
    shifts, words, confidence = rank_shifts(tracks)
    moves, host_words = host_offsets(tracks, shifts)
    shifts = [shift - moves.get(pos, 0.0) for pos, shift in enumerate(shifts)]
    if host_words:  # the bases agree, the hosts' clocks may not: say the latter only
        words = words.removesuffix(": one clock, no shift") + host_words
    elif confidence == "high":  # no host named: an offset between hosts stays in the waits
        words += " (ranks on several hosts carry their clocks' offset into every wait)"
    per_rank = [shifted(t.arrivals, shift) for t, shift in zip(tracks, shifts)]
    if sum(1 for groups in per_rank if groups) < 2:
        return None
    result = Alignment(
        ranks,
        BY_ORDER,
        words,
        confidence,
        on_host=on_host,
        _timelines=list(timelines),
        _tracks=tracks,
        _shifts=shifts,
    )
    methods = set()
    for group in sorted({g for groups in per_rank for g in groups}, key=str):
        members = tuple(pos for pos, groups in enumerate(per_rank) if groups.get(group))
        if len(members) < 2:
            continue
        lists = [per_rank[pos][group] for pos in members]
        if all(a.seq is not None for arrivals in lists for a in arrivals):
            methods.add(BY_SEQ)
            calls = _by_seq(group, members, lists)
        else:
            calls, how = _by_order(group, members, lists, result)
            methods.add(how)
        # the first call is where the ranks' profiling windows meet: it waits for the rank whose
        # profiler started last (100-870 ms on the H200 fixtures), which the profiler causes
        result.opening.extend(calls[:1])
        result.calls.extend(calls[1:])
    if not result.calls:
        return None
    result.clock_shifts_us = {ranks[pos]: move for pos, move in moves.items()}
    result.calls.sort(key=lambda c: c.first_start)
    result.method = "; ".join(sorted(methods))
    if BY_ORDER_ONLY in methods:
        result.clock_confidence = "low"
    result.typical_spread_us = statistics.median(c.spread for c in result.calls)
    return result


def _margin(call: Call) -> float:
    """How long after the next-latest rank the last one arrived."""
    starts = sorted(a.start for a in call.arrivals)
    return starts[-1] - starts[-2] if len(starts) > 1 else 0.0


def _binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): how likely k or more last arrivals of n are by chance."""
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def _call(group: str | None, members: tuple[int, ...], heads: list[Arrival]) -> Call:
    size = next((a.size for a in heads if a.size is not None), None)
    return Call(heads[0].op, group, size, tuple(members), tuple(heads))


def _by_seq(group: str | None, members: tuple[int, ...], lists: list[list[Arrival]]) -> list[Call]:
    maps = [{a.seq: a for a in arrivals if a.seq is not None} for arrivals in lists]
    common = set(maps[0]).intersection(*maps[1:])
    return [_call(group, members, [m[s] for m in maps]) for s in sorted(common)]


def _agree(heads: list[Arrival]) -> bool:
    sizes = {a.size for a in heads if a.size is not None}
    return len({a.op for a in heads}) == 1 and len(sizes) <= 1


def _by_order(
    group: str | None, members: tuple[int, ...], lists: list[list[Arrival]], result: Alignment
) -> tuple[list[Call], str]:
    calls, skipped, mismatched = _merge(group, members, lists, overlap=True)
    if len(calls) < MIN_MATCHED * min(len(arrivals) for arrivals in lists):
        calls, skipped, mismatched = _merge(group, members, lists, overlap=False)
        how = BY_ORDER_ONLY
    else:
        how = BY_ORDER
    for pos, n in skipped.items():
        rank = result.ranks[pos]
        result.unmatched[rank] = result.unmatched.get(rank, 0) + n
    result.mismatched += mismatched
    return calls, how


def _merge(
    group: str | None, members: tuple[int, ...], lists: list[list[Arrival]], overlap: bool
) -> tuple[list[Call], dict[int, int], int]:
    """One pass over the ranks' kernels in order (see the module docstring); with `overlap`, a head
    that ended before another head started has no partner and is skipped."""
    idx = [0] * len(lists)
    calls: list[Call] = []
    mismatched = 0
    skipped = {pos: 0 for pos in members}
    while all(i < len(arrivals) for i, arrivals in zip(idx, lists)):
        heads = [arrivals[i] for i, arrivals in zip(idx, lists)]
        if overlap and all(a.op in OVERLAPPING_OPS for a in heads):
            latest = max(a.start for a in heads)
            first_end = min(range(len(heads)), key=lambda j: heads[j].end)
            if heads[first_end].end < latest:
                idx[first_end] += 1
                skipped[members[first_end]] += 1
                continue
        if _agree(heads):
            calls.append(_call(group, members, heads))
        else:
            mismatched += 1
        idx = [i + 1 for i in idx]
    for j, arrivals in enumerate(lists):
        skipped[members[j]] += len(arrivals) - idx[j]
    return calls, skipped, mismatched


def _covered(busy: list[tuple[float, float]], starts: list[float], lo: float, hi: float) -> float:
    """How much of [lo, hi] the disjoint intervals cover."""
    if hi <= lo:
        return 0.0
    total = 0.0
    i = max(0, bisect.bisect_right(starts, lo) - 1)
    while i < len(busy) and busy[i][0] < hi:
        a, b = busy[i]
        total += max(0.0, min(b, hi) - max(a, lo))
        i += 1
    return total
