"""Whose clock each rank's trace runs on, and how far apart the clocks of several hosts are.

Kineto writes `ts` in µs from the trace's `baseTimeNanoseconds`: each rank is first shifted by its
base's difference from the first rank's (`rank_shifts`). Ranks on several hosts carry the offset
between their hosts' clocks besides. A collective ends on every rank together (the last data arrives
for all), so the end times of one rank per host, set against the first host's, line up at the
offset between their clocks (`end_offset`: the most common difference). Hosts come from the traces'
file names (`HOST_PID.<ts>.pt.trace.json`, as torch's handler names them; `hosts_of`); each host's
offset is taken off its ranks before the alignment matches calls and computes waits
(`host_offsets`), and said. Traces that name no host are taken as one clock, as before.
"""

from __future__ import annotations

import bisect
import re
import statistics
from pathlib import Path

from ncclprobe.evidence.run.profile.arrivals import Track

MIN_OFFSET_US = 20.0  # a host clock whose offset is smaller is left as it is (the ends' jitter)
END_BIN_US = 5.0  # end-time differences are counted in bins this wide
END_SAMPLE = 400  # ends of a host's rank lined up against the first host's
MAX_OFFSET_US = 10_000_000.0  # offsets looked for up to 10 s
MIN_LINED_UP = 0.5  # an offset must line up this share of the ends, else it is not known


def hosts_of(tracks: list[Track]) -> list[str] | None:
    """The host in each trace's file name (`HOST_PID.<ts>.pt.trace.json`, torch's handler), or
    None unless every name has one."""
    found = [re.match(r"^(.+)_[0-9]+\.[0-9]+\.pt\.trace\.json", Path(t.path).name) for t in tracks]
    names = [m[1] for m in found if m is not None]
    return names if len(names) == len(found) else None


def end_offset(ends: list[float], ref: list[float]) -> tuple[float, int] | None:
    """How far the clock of `ends` runs ahead of the clock of `ref`, from collective end times: the
    most common difference (bins of END_BIN_US, within MAX_OFFSET_US; ties to the smaller), refined
    to the median in its bin, and how many ends it lines up. None when it lines up too few."""
    diffs: dict[int, list[float]] = {}
    for e in ends[:END_SAMPLE]:
        lo = bisect.bisect_left(ref, e - MAX_OFFSET_US)
        hi = bisect.bisect_right(ref, e + MAX_OFFSET_US)
        for r in ref[lo:hi]:
            diffs.setdefault(round((e - r) / END_BIN_US), []).append(e - r)
    if not diffs:
        return None
    best = max(
        diffs,
        key=lambda b: (
            len(diffs[b]) + len(diffs.get(b - 1, ())) + len(diffs.get(b + 1, ())),
            -abs(b),
        ),
    )
    near = diffs[best] + diffs.get(best - 1, []) + diffs.get(best + 1, [])
    if len(near) < max(3, MIN_LINED_UP * min(len(ends[:END_SAMPLE]), len(ref))):
        return None
    return statistics.median(near), len(near)


def host_offsets(tracks: list[Track], shifts: list[float]) -> tuple[dict[int, float], str]:
    """Per position the offset of its host's clock from the first host's (µs; only hosts whose
    offset is at least MIN_OFFSET_US), where the trace names give several hosts; and the words."""
    hosts = hosts_of(tracks)
    if not hosts or len(set(hosts)) < 2:
        return {}, ""
    first: dict[str, int] = {}
    for pos, host in enumerate(hosts):
        first.setdefault(host, pos)

    def ends(pos: int) -> list[float]:
        return sorted(a.end + shifts[pos] for items in tracks[pos].arrivals.values() for a in items)

    ref = ends(0)
    moves: dict[str, float] = {}
    unknown = []
    for host, pos in first.items():
        if host == hosts[0]:
            continue
        found = end_offset(ends(pos), ref)
        if found is None:
            unknown.append(host)
        elif abs(found[0]) >= MIN_OFFSET_US:
            moves[host] = found[0]
    words = (
        f"; {len(first)} hosts (from the trace names), their clocks' offsets from {hosts[0]}'s found "
        "from the collectives' end times, "
        + (
            "taken off before the waits: " + _offsets_text(moves)
            if moves
            else f"all under {MIN_OFFSET_US:.0f} µs: nothing moved"
        )
        + (f"; not found for {', '.join(unknown)} (their waits carry it)" if unknown else "")
    )
    return {pos: moves[h] for pos, h in enumerate(hosts) if h in moves}, words


def _offsets_text(moves: dict[str, float], shown: int = 3) -> str:
    """`host1 +3.000 ms, host2 +6.000 ms` or, for many hosts, the first few and the range."""

    def natural(host: str) -> list[int | str]:
        return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", host)]

    order = sorted(moves, key=natural)
    text = ", ".join(f"{h} {moves[h] / 1000.0:+.3f} ms" for h in order[:shown])
    if len(order) > shown:
        low, high = min(moves.values()), max(moves.values())
        text += (
            f", ... ({len(order)} hosts moved, from {low / 1000.0:+.3f} to {high / 1000.0:+.3f} ms;"
            " every host's in the JSON output)"
        )
    return text


def rank_shifts(tracks: list[Track]) -> tuple[list[float], str, str]:
    """Per rank the shift (µs) onto the first rank's clock, the words, and how far to trust it."""
    known = [t.base for t in tracks]
    missing = [t.rank if t.rank is not None else i for i, t in enumerate(tracks) if t.base is None]
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
    return shifts, words, "high"
