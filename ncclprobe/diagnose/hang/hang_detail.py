"""TORCH_DISTRIBUTED_DEBUG=DETAIL in the dumps: its check backends, and a check that ended without
its collective.

With DETAIL, torch wraps each group's backend in a ProcessGroupWrapper with a gloo backend of its
own (`distributed_c10d._create_process_group_wrapper`, torch 2.13). Before each collective the
wrapper waits at that backend's monitored barrier, then all-gathers the collective's fingerprint
(operation, sequence number, dtypes, devices, shapes: int64 tensors, first its length, [1], then
itself, [k]) and issues the collective only where every rank's fingerprint is the same; where one
differs it raises on every rank (`ProcessGroupWrapper.cpp`, `runCollectiveChecks`). The recorder
keeps the all_gathers, not the barrier (gloo records no send/recv), under the same empty name as
the job's groups (`hang_groups` tells them apart by pg_id).

So a check backend is a group, among those sharing a name, whose every call is an all_gather of
one 1-D int64 tensor on gloo; the group it checks is the one whose collective follows its checks
in the ranks' record order. A check whose last all_gather completed on every member, after which
no member issued the group's next collective, raised: the ranks' calls at that number differ
(which way is in the ranks' logs: `Detected mismatch between collectives on ranks`). A rank that
never reached the barrier leaves no trace here: the log names it (`failed to pass monitoredBarrier`).
"""

from __future__ import annotations

from collections import Counter

from ncclprobe.diagnose.hang.hang_groups import Group
from ncclprobe.evidence.hang.flight_recorder import Dump
from ncclprobe.evidence.hang.fr_table import NONE

CHECK = ("gloo", "all_gather", ("Long",))  # backend, operation, input dtypes of a check's calls


def link(groups: dict[str, Group], dumps: list[Dump], rows: dict) -> dict[str, str]:
    """{check backend's name: the name of the group it checks}; each check group's `checks` set."""
    checkers = [g for g in groups.values() if g.pg_id is not None and _is_check(g)]
    if not checkers:
        return {}
    sizes = {d.rank: len(d.table) for d in dumps}
    skip = {None, *(c.name for c in checkers)}
    owners = {
        rank: {i: name for name, found in mine.items() for i in found}
        for rank, mine in rows.items()
    }
    out = {}
    for h in checkers:
        follows: Counter[str] = Counter()
        for rank, mine in rows.items():
            owner = owners[rank]
            for i in mine.get(h.name, ()):
                j = i + 1
                while j < sizes[rank] and owner.get(j) in skip:
                    j += 1
                if j < sizes[rank]:
                    follows[owner[j]] += 1
        checked = follows.most_common(1)[0][0] if follows else _created_before(h, groups)
        if checked is not None:
            out[h.name] = checked
    for h_name, g_name in out.items():
        groups[h_name].checks = groups[g_name].label
    return out


def _is_check(group: Group) -> bool:
    """Every call of every member is an all_gather of one 1-D int64 tensor on gloo."""
    seen = False
    for calls in group.calls.values():
        table = calls.table
        for row in calls.rows:
            (backend, op, _, _, ins, _), in_dtypes, _ = table.calls[table.call[row]]
            if (backend, op, in_dtypes) != CHECK or len(ins) != 1 or len(ins[0]) != 1:
                return False
            seen = True
    return seen and not any(group.p2p.values())


def _created_before(h: Group, groups: dict[str, Group]) -> str | None:
    """The backend created just before a check backend under its name (the wrapper makes its
    checker right after the backend it wraps)."""
    for g in groups.values():
        if (
            g.recorded_name == h.recorded_name
            and g.pg_id is not None
            and h.pg_id is not None
            and g.pg_id == h.pg_id - 1
        ):
            return g.name
    return None


def failed_checks(
    groups: dict[str, Group], checks: dict[str, str], rows: dict, dumps: list[Dump], stuck: list
) -> list[tuple[Group, int, Group, int]]:
    """(group, its next seq, check group, the check's last seq) where DETAIL's check of the
    group's next collective completed on every member and no member issued that collective."""
    by_rank = {d.rank: d for d in dumps}
    stopped = {id(s.group) for s in stuck}
    out = []
    for h_name, g_name in checks.items():
        h, g = groups[h_name], groups[g_name]
        dumped = g.dumped
        if id(g) in stopped or not dumped or len({g.enqueued[r] for r in dumped}) != 1:
            continue
        last = {_last_check(h, g, by_rank[r], rows[r]) for r in dumped}
        seq = next(iter(last)) if len(last) == 1 else None
        if seq is not None and _done(h, seq):
            out.append((g, g.enqueued[dumped[0]] + 1, h, seq))
    return out


def _done(h: Group, seq: int) -> bool:
    """Every dumped member of `h` holds the same call at `seq` and one of them completed it (a
    dump taken as gloo finished it may show the others' bookkeeping behind)."""
    i = seq - h.window_start
    return 0 <= i < len(h.agreed) and h.agreed[i] == 1 and seq <= max(h.completed.values())


def _last_check(h: Group, g: Group, dump: Dump, rows: dict[str, list[int]]) -> int | None:
    """The seq of `h`'s last call on this rank where no collective of `g` came after it; else None."""
    table = dump.table
    mine = rows.get(h.name)
    if not mine:
        return None
    collectives = [
        i for i in rows.get(g.name, ()) if not table.is_p2p[i] and table.collective_seq[i] != NONE
    ]
    seq = table.collective_seq[mine[-1]]
    if (collectives and collectives[-1] > mine[-1]) or seq == NONE:
        return None
    return seq


def notes(groups: dict[str, Group], shared: set[str], checks: dict[str, str]) -> list[str]:
    out = []
    for name in sorted(shared):
        named = [g for g in groups.values() if g.recorded_name == name and g.pg_id is not None]
        out.append(
            f"the dumps record {len(named)} backends under one name ("
            + (f"{name!r}" if name else "the empty name")
            + "), as TORCH_DISTRIBUTED_DEBUG=DETAIL does (it names only its wrapper): each is "
            "taken apart by its pg_id and matched across ranks by it (each rank numbers its "
            "backends in the order it created them: the same where every rank creates the same groups)"
        )
    for h_name, g_name in checks.items():
        out.append(
            f"{groups[h_name].label}: TORCH_DISTRIBUTED_DEBUG=DETAIL's check of each collective of "
            f"{groups[g_name].label} (an all_gather of its fingerprint after a monitored barrier, which "
            "the recorder does not record: a rank that never reached a check leaves no trace in the "
            "dumps; the log names it, `failed to pass monitoredBarrier`)"
        )
        counts = groups[h_name].enqueued
        if 0 in counts and len(set(counts.values())) > 1:
            out.append(
                f"{groups[h_name].label}: rank 0's count ({counts[0]}) also holds the monitored "
                "barrier it coordinates (a receive from and a send to every other rank per check), "
                "so it runs ahead of the others' on a healthy job too: no rank is behind by it"
            )
    return out
