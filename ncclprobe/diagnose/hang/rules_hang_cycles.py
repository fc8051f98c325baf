"""Groups that wait on each other in the Flight Recorder dumps: stuck collectives whose missing ranks
wait, in turn, in each other's, found and worded as one finding per cycle.

It lives apart from `rules_hang` because finding a cycle through the groups is one reading of its
own; the cycle also tells `rules_hang` which missing ranks it already explains.
"""

from __future__ import annotations

from ncclprobe.diagnose.hang import hang as H
from ncclprobe.diagnose.hang import hang_words as W
from ncclprobe.findings import Finding


def cycles(hang: H.Hang) -> tuple[list[list[tuple[H.Stuck, int, int]]], dict[int, set[int]]]:
    """Stuck collectives whose missing ranks wait, in turn, in each other's: [(stuck, waiting
    rank, missing rank)] per cycle, and per stuck collective the missing ranks a cycle explains."""
    by_call = {(s.group.name, s.seq): s for s in hang.stuck}
    edges: dict[int, tuple[H.Stuck, int, int, H.Stuck]] = {}
    for s in hang.stuck:
        for m in s.missing:
            there = hang.pending_elsewhere(m, s.group)
            target = by_call.get((there.group, there.seq)) if there else None
            if target is not None and s.waiting:
                edges.setdefault(id(s), (s, s.waiting[0], m, target))
    cycles: list[list[tuple[H.Stuck, int, int]]] = []
    explained: dict[int, set[int]] = {}
    seen: set[int] = set()
    for start in list(edges):
        path: list[tuple[H.Stuck, int, int]] = []
        node = start
        while node in edges and node not in {id(p[0]) for p in path}:
            s, waiter, missing, target = edges[node]
            path.append((s, waiter, missing))
            node = id(target)
        if node == start and start not in seen:
            cycles.append(path)
            in_cycle = {(s.group.name, s.seq) for s, _, _ in path}
            for s, _, _ in path:
                seen.add(id(s))
                explained.setdefault(id(s), set()).update(_held_in(hang, s, in_cycle))
    return cycles, explained


def _held_in(hang: H.Hang, stuck: H.Stuck, calls: set[tuple[str, int]]) -> tuple[int, ...]:
    """The missing ranks of `stuck` that wait in one of `calls` (at 3 ranks and more, a cycle's
    link holds several: every rank that issued the other group's call first)."""
    out = []
    for m in stuck.missing:
        there = hang.pending_elsewhere(m, stuck.group)
        if there is not None and (there.group, there.seq) in calls:
            out.append(m)
    return tuple(out)


def cycle_finding(hang: H.Hang, cycle: list[tuple[H.Stuck, int, int]]) -> Finding:
    calls = {(s.group.name, s.seq) for s, _, _ in cycle}
    held = [(s, s.waiting, _held_in(hang, s, calls)) for s, _, _ in cycle]
    links = [
        f"{W.rank_word(waiting)} {W.verb(waiting, 'waits', 'wait')} in {s.group.label} #{s.seq} "
        f"({s.calls[waiting[0]].op}) for {W.rank_word(missing)}"
        for s, waiting, missing in held
    ]
    labels = [s.group.label for s, _, _ in cycle]
    return Finding(
        rule="hang-groups",
        severity="error",
        confidence="high",
        title=f"{' and '.join(labels)} wait on each other: " + "; ".join(links),
        detail=(
            "Each of these collectives misses a rank that is itself waiting in the next one: "
            + "; ".join(links)
            + ". The ranks issue the groups' collectives in different orders, and each blocks in "
            "its first before issuing the second. Issue collectives of different groups in one "
            "order on every rank (or do not block between them)."
        ),
        evidence={
            "cycle": [
                {
                    "group": s.group.name,
                    "seq": s.seq,
                    "waiting_rank": w,
                    "missing_rank": m,
                    "waiting_ranks": list(waiting),
                    "missing_ranks": list(missing),
                }
                for (s, w, m), (_, waiting, missing) in zip(cycle, held)
            ]
        },
    )
