"""Why a job hung, from its ranks' Flight Recorder dumps and its log: one pure function each.

Reads `hang.build(ev.flight_recorder)` (the groups side by side) and `ev.job_logs`. Causes first:
a member that never enqueued the collective the others wait in (and what it last completed: the
place to look), collectives that differ at one sequence number, the same collectives in another
order, a send without its receive, groups that wait on each other; then what is only a symptom (a
group stuck behind another group's collective, every rank in one collective that none finished)
and, when nothing is pending, that every rank finished every recorded collective. What the
evidence cannot show is said as not checked, with the one command that would show it.
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import flight_recorder_command
from ncclprobe.diagnose.hang import hang as H
from ncclprobe.diagnose.hang import hang_words as W
from ncclprobe.diagnose.hang.rank_exits import RankExit, exit_findings, own_exits
from ncclprobe.diagnose.hang.rules_hang_detail import check_failed, not_cleared, unrecorded_barrier
from ncclprobe.diagnose.hang.rules_hang_log import detail_findings, log_notes, log_only_findings
from ncclprobe.diagnose.hang.rules_hang_p2p import p2p_findings
from ncclprobe.diagnose.hang.rules_hang_p2p import pending as p2p_pending
from ncclprobe.evidence import bundle as E
from ncclprobe.findings import Finding, NotChecked, RuledOut


def hang_findings(ev: E.Evidence) -> list:
    exited = exit_findings(ev) if ev.job_logs else []  # a rank that failed by itself: the cause
    if not any(d.entries for d in ev.flight_recorder):
        off = [_recorder_off(ev)] if ev.flight_recorder else []
        return exited + off + (log_only_findings(ev) if ev.job_logs else [])
    return exited + _dump_findings(ev)


def _dump_findings(ev: E.Evidence) -> list:
    exits = own_exits(ev) if ev.job_logs else {}
    hang = H.build(ev.flight_recorder)
    hung = _hang_evidenced(ev, hang)
    cycles, explained = _cycles(hang)
    out: list = [_cycle_finding(hang, c) for c in cycles]
    checked = ev.job_logs and any(g.checks for g in hang.groups.values())
    from_log = detail_findings(ev) if checked else []  # DETAIL's own words: what its checks saw
    for stuck in hang.stuck:
        if stuck.check is not None:
            if not any(f.evidence.get("seq") == stuck.seq for f in from_log):
                out.append(check_failed(stuck))
            continue
        if stuck.missing and not set(stuck.missing) <= explained.get(id(stuck), set()):
            out.append(_missing(hang, stuck, exits))
        if stuck.mismatch:
            swap = H.order_swap(stuck)
            out.append(_order(stuck, swap) if swap else _mismatch(stuck))
        if stuck.agreed:
            out.append(_agreed(hang, stuck, hung))
    out += from_log + p2p_findings(hang)
    if hang.unreadable:
        out.append(_unreadable(hang))
    if not hang.stuck and not p2p_pending(hang):
        out.append(_all_done(hang, hung, logs=bool(ev.job_logs)))
    return out + _coverage(ev, hang)


def notes(ev: E.Evidence) -> list[str]:
    """What the dumps and logs show that no finding says: how memberships were taken, the ring
    buffer's reach, the logs' timeouts and the launcher's verdict."""
    dumps = _read_note(H.build(ev.flight_recorder)) if ev.flight_recorder else []
    dumps += H.build(ev.flight_recorder).notes if ev.flight_recorder else []
    return dumps + (log_notes(ev) if ev.job_logs else [])


def _read_note(hang: H.Hang) -> list[str]:
    """Which ranks' dumps were read, which members have none, which could not be read, and how many
    other files of the folders were skipped: one line, ranges."""
    members = {r for g in hang.groups.values() for r in g.members}
    absent = sorted(members - set(hang.ranks) - set(hang.unreadable))
    skipped = getattr(hang.dumps, "skipped", 0)
    if not (absent or hang.unreadable or skipped or len(hang.ranks) > 8):
        return []
    parts = [f"dumps read: {W.rank_word(hang.ranks)}"]
    if absent:
        parts.append(f"no dump of {W.rank_word(absent)} (members of the recorded groups)")
    if hang.unreadable:
        parts.append(f"unreadable: {W.rank_word(hang.unreadable)}")
    if skipped:
        parts.append(f"{skipped} other file(s) in the folder skipped (not named as rank dumps)")
    return ["; ".join(parts)]


def _hang_evidenced(ev: E.Evidence, hang: H.Hang) -> bool:
    """A job log saw a timeout or a failure, or an entry outlived the watchdog (retired, not done)."""
    retired = any(d.table.timed_out() for d in hang.dumps)
    return retired or any(log.hang_seen for log in ev.job_logs)


# ---- causes ------------------------------------------------------------------------------


def _missing(hang: H.Hang, stuck: H.Stuck, exits: dict[int, RankExit]) -> Finding:
    group, seq, waiting = stuck.group, stuck.seq, stuck.waiting
    call = stuck.calls[waiting[0]]
    absent = [_whereabouts(hang, group, r, exits.get(r)) for r in stuck.missing]
    return Finding(
        rule="hang-missing-rank",
        severity="error",
        confidence="high",
        title=f"{W.rank_word(stuck.missing)} never entered collective {seq} of {group.label} "
        f"({W.call_text(call)}) that {W.rank_word(waiting)} {W.verb(waiting, 'waits', 'wait')} in",
        detail=(
            f"{W.rank_word(waiting).capitalize()} enqueued {call.op} #{seq} of {group.label}{W.at(call)} and "
            f"{W.verb(waiting, 'waits', 'wait')} in it for the other members; "
            + "; ".join(text for text, _ in absent)
            + ". A collective completes only when every member of its group enters it."
        ),
        evidence={
            "group": group.name,
            "group_desc": group.desc,
            "seq": seq,
            "op": call.op,
            "input_sizes": [list(s) for s in call.first.input_sizes],
            "waiting_ranks": list(waiting),
            "missing_ranks": list(stuck.missing),
            "last_completed": {str(r): group.completed.get(r) for r in stuck.missing},
            "missing_rank_state": {str(r): state for r, (_, state) in zip(stuck.missing, absent)},
        },
    )


def _whereabouts(
    hang: H.Hang, group: H.Group, rank: int, exited: RankExit | None = None
) -> tuple[str, dict]:
    """Where a member that never enqueued a group's collective is, as far as the dumps show (and
    the log, where it says the rank failed by itself)."""
    last_seq = group.completed.get(rank, 0)
    last_seq_issued = group.last_seq(rank)
    last = group.call(rank, last_seq_issued) if last_seq_issued is not None else None
    said = f"rank {rank} never enqueued it: its last collective in {group.label} is " + (
        f"#{last.seq} ({last.op}, {'completed' if last.completed else 'not completed'}{W.at(last)})"
        if last
        else "none recorded"
    )
    elsewhere = hang.pending_elsewhere(rank, group)
    if elsewhere is not None:
        other = hang.groups[elsewhere.group]
        return (
            f"{said}, and it waits in {other.label}'s collective #{elsewhere.seq} "
            f"({W.call_text(elsewhere)}{W.at(elsewhere)})",
            {"last_completed": last_seq, "waits_in": {"group": other.name, "seq": elsewhere.seq}},
        )
    if exited is not None:
        return (
            f"{said}, and nothing of rank {rank} is pending in any group: it never will, the log "
            f"says {exited.said}"
            + (f" (raised at {exited.raised_at})" if exited.raised_at else "")
            + ": it died before this call"
            + (", in its own code" if exited.exception and not exited.signal else ""),
            {"last_completed": last_seq, "waits_in": None, "exitcode": exited.exitcode},
        )
    return (
        f"{said}, and nothing of rank {rank} is pending in any group: it completed every "
        f"collective it issued, so it is outside the collectives (host code, data loading, a branch "
        f"or an early exit that skips this call): look at what it runs after its last call",
        {"last_completed": last_seq, "waits_in": None},
    )


def _mismatch(stuck: H.Stuck) -> Finding:
    group, seq = stuck.group, stuck.seq
    kinds = W.differences(stuck)
    by_sig: dict[tuple, list[int]] = {}
    for r, c in sorted(stuck.calls.items()):
        by_sig.setdefault(c.signature, []).append(r)
    parts = [f"{W.rank_word(rs)}: {W.call_text(stuck.calls[rs[0]])}" for rs in by_sig.values()]
    return Finding(
        rule="hang-mismatch",
        severity="error",
        confidence="high",
        title=f"collective {seq} of {group.label} differs between ranks ({', '.join(kinds)}): "
        + "; ".join(parts),
        detail=(
            f"Every member must issue the same collective at the same sequence number; at #{seq} of "
            f"{group.label} "
            + "; ".join(
                f"{W.rank_word(rs)} issued {W.call_text(stuck.calls[rs[0]])}{W.at(stuck.calls[rs[0]])}"
                for rs in by_sig.values()
            )
            + f". Different {' and '.join(kinds)} at one sequence number hang or corrupt the result"
            + W.completion(stuck)
        ),
        evidence={
            "group": group.name,
            "group_desc": group.desc,
            "seq": seq,
            "differs_in": kinds,
            "calls": {str(r): W.call_json(c) for r, c in sorted(stuck.calls.items())},
        },
    )


def _order(stuck: H.Stuck, swap: tuple[int, int, int]) -> Finding:
    a, b, later = swap
    group, seq = stuck.group, stuck.seq
    ca, cb = stuck.calls[a], stuck.calls[b]
    return Finding(
        rule="hang-order",
        severity="error",
        confidence="high",
        title=f"ranks {a} and {b} issue {group.label}'s collectives in a different order from #{seq}: "
        f"{ca.op} then {cb.op} on rank {a}, {cb.op} then {ca.op} on rank {b}",
        detail=(
            f"At #{seq} of {group.label} rank {a} issued {W.call_text(ca)}{W.at(ca)} and rank {b} "
            f"{W.call_text(cb)}{W.at(cb)}; rank {b} issues rank {a}'s call later, at #{later}, and rank {a} "
            f"rank {b}'s: the same calls, in another order. Collectives are matched by order, so each "
            "rank's call meets the other's different one: it hangs or corrupts"
            + W.completion(stuck)[:-1]
            + ". Issue them in one order on every rank."
        ),
        evidence={
            "group": group.name,
            "group_desc": group.desc,
            "seq": seq,
            "ranks": [a, b],
            "calls": {str(a): W.call_json(ca), str(b): W.call_json(cb)},
            "swapped_at": later,
        },
    )


def _cycles(hang: H.Hang) -> tuple[list[list[tuple[H.Stuck, int, int]]], dict[int, set[int]]]:
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


def _cycle_finding(hang: H.Hang, cycle: list[tuple[H.Stuck, int, int]]) -> Finding:
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


def _agreed(hang: H.Hang, stuck: H.Stuck, hung: bool) -> Finding:
    group, seq = stuck.group, stuck.seq
    call = next(iter(stuck.calls.values()))
    behind = {r: hang.pending_elsewhere(r, group) for r in stuck.calls}
    older = {
        r: c
        for r, c in behind.items()
        if c is not None
        and (c.first.time_created_ns or 0) < (stuck.calls[r].first.time_created_ns or 0)
    }
    evidence = {"group": group.name, "group_desc": group.desc, "seq": seq, "op": call.op}
    if len(older) == len(stuck.calls):
        first = next(iter(older.values()))
        other = hang.groups[first.group]
        return Finding(
            rule="hang-behind-group",
            severity="warning",
            confidence="high",
            title=f"{group.label}'s collective #{seq} waits behind {other.label}'s #{first.seq}: "
            f"{'every' if not stuck.undumped else 'every dumped'} member is in it, each with an older "
            f"call of {other.label} unfinished",
            detail=(
                f"Every member of {group.label} issued {W.call_text(call)} as #{seq} with the same "
                f"arguments, after a collective of another group that is not finished on it ("
                + "; ".join(
                    f"rank {r}: {hang.groups[c.group].label} #{c.seq}" for r, c in older.items()
                )
                + f"). {group.label} is not the cause: look at {other.label} first."
            ),
            evidence={**evidence, "behind": {str(r): [c.group, c.seq] for r, c in older.items()}},
        )
    who = (
        f"every member of {group.label}"
        if not stuck.undumped
        else f"every dumped member of {group.label} ({W.rank_word(stuck.calls)}; no dump of "
        f"{W.rank_word(stuck.undumped)})"
    )
    title = (
        f"{who} is in collective #{seq} ({W.call_text(call)}) with the same call, "
        "and none finished it"
    )
    if not hung:
        return Finding(
            rule="hang-in-flight",
            severity="info",
            confidence="medium",
            title=title + ": it was in flight when the dumps were taken",
            detail="The ranks agree on it and no log shows a timeout or a failure: a dump taken "
            "while the collective ran shows this.",
            evidence=evidence,
        )
    return Finding(
        rule="hang-agreed",
        severity="warning",
        confidence="medium",
        title=title,
        detail=(
            f"The dumps show no disagreement at #{seq}: every member entered {W.call_text(call)} with the same "
            "sizes and dtypes. The cause is below the collectives (NCCL's transport, the network, a GPU "
            "or its peer link) or in a group these dumps do not record: read the ranks' NCCL logs."
        ),
        evidence=evidence,
    )


def _unreadable(hang: H.Hang) -> Finding:
    """Rank files that are there but could not be read: named with why; the rest concludes."""
    by_why: dict[str, list[int]] = {}
    for rank, (_, why) in sorted(hang.unreadable.items()):
        by_why.setdefault(why, []).append(rank)
    ranks = sorted(hang.unreadable)
    first_rank, (first_path, _) = ranks[0], hang.unreadable[ranks[0]]
    whose = (
        f"{W.rank_word(ranks)}'s dump ({first_path}) is"
        if len(ranks) == 1
        else f"the dumps of {W.rank_word(ranks)} are"
    )
    reasons = "; ".join(f"{W.rank_word(rs)}: {why}" for why, rs in list(by_why.items())[:5])
    if len(by_why) > 5:
        reasons += f"; and {len(by_why) - 5} other reasons"
    return Finding(
        rule="hang-dumps-unreadable",
        severity="warning",
        confidence="high",
        title=f"{whose} there but could not be read: the diagnosis concludes without "
        + ("it" if len(ranks) == 1 else "them"),
        detail=(
            f"{reasons}. What these ranks were doing is unknown; every conclusion here rests on the "
            f"other {len(hang.ranks)} dumps. Dump again (torch rewrites them on the next timeout) "
            "or check the files (an empty or cut file: the rank died while writing it)."
        ),
        evidence={
            "unreadable": {
                str(r): {"path": p, "why": why} for r, (p, why) in hang.unreadable.items()
            },
            "first": first_rank,
        },
    )


def _all_done(hang: H.Hang, hung: bool, logs: bool = False) -> Finding:
    """Nothing pending. A clean verdict only where the dumps could show a hang: members that
    enqueued different counts of a group's collectives are behind (the rank with fewer stopped
    first), and with DETAIL's checks a rank that never reached the next check leaves no trace, so
    dumps alone (no log that says the job ended cleanly) cannot clear the job."""
    n = sum(len(c) for g in hang.groups.values() for c in g.calls.values())
    groups = ", ".join(g.label for g in hang.groups.values())
    members = {r for g in hang.groups.values() for r in g.members}
    partial = members - set(hang.ranks) or hang.unreadable
    who = "every rank whose dump was read" if partial else "every rank"
    title = f"{who} completed every collective its dump records ({n} calls over {groups})"
    behind = _behind(hang)
    if behind and not hung:
        said = "; ".join(
            f"{g.label}: {W.rank_word(late)} enqueued {g.enqueued[late[0]]}, the others up to "
            f"{max(g.enqueued.values())}"
            for g, late in behind
        )
        late_ranks = sorted({r for _, late in behind for r in late})
        return Finding(
            rule="hang-none-pending",
            severity="warning",
            confidence="medium",
            title=f"{title}, but {W.rank_word(late_ranks)} issued fewer: {said}",
            detail=(
                f"Nothing is pending in the dumps, yet the members of a group enqueued different "
                f"counts of its collectives ({said}): a collective completes only when every member "
                f"enters it, so {W.rank_word(late_ranks)} stopped issuing while the others went on, "
                "or its dump was taken earlier than theirs. The job's log says which (--log)."
                + unrecorded_barrier(hang)
            ),
            evidence={"calls": n, "ranks": list(hang.ranks), "behind": late_ranks},
        )
    if not hung and not logs and any(g.checks for g in hang.groups.values()):
        return not_cleared(title, n, list(hang.ranks))
    if not hung:
        return Finding(
            rule="hang-none-pending",
            severity="info",
            confidence="high",
            title=title,
            detail="Nothing is pending in the dumps: no collective or p2p operation is stuck."
            + unrecorded_barrier(hang),
            evidence={"calls": n, "ranks": list(hang.ranks)},
        )
    return Finding(
        rule="hang-none-pending",
        severity="warning",
        confidence="medium",
        title=title + ": the hang is elsewhere",
        detail=(
            "The log shows a timeout or a failure, yet no recorded collective is pending: the job "
            "waited outside these groups (host code, a store or barrier of another library, a group "
            "created without the Flight Recorder) or the dumps were taken before the hang."
            + unrecorded_barrier(hang)
        ),
        evidence={"calls": n, "ranks": list(hang.ranks)},
    )


def _behind(hang: H.Hang) -> list[tuple[H.Group, list[int]]]:
    """(group, its members that enqueued fewer of its collectives than another), for the job's
    groups; DETAIL's check groups are left out: their rank 0 also counts the monitored barrier's
    sends and receives it coordinates, so its count runs ahead on a healthy job too."""
    out = []
    for g in hang.groups.values():
        counts = {r: g.enqueued[r] for r in g.dumped if r in g.enqueued}
        if g.checks is None and len(set(counts.values())) > 1:
            low = min(counts.values())
            out.append((g, sorted(r for r, c in counts.items() if c == low)))
    return out


# ---- what cannot be known ---------------------------------------------------------------


def _recorder_off(ev: E.Evidence) -> NotChecked:
    return NotChecked(
        rule="hang-dumps",
        hypothesis="which collective each rank was in",
        missing=f"entries: the {len(ev.flight_recorder)} dump(s) hold none (the Flight Recorder "
        "was off: TORCH_FR_BUFFER_SIZE unset or 0)",
        next_command=flight_recorder_command(),
    )


def _coverage(ev: E.Evidence, hang: H.Hang) -> list:
    out: list = []
    undumped = sorted({r for g in hang.groups.values() for r in g.members} - set(hang.ranks))
    if undumped:
        out.append(
            NotChecked(
                rule="hang-dumps",
                hypothesis=f"what ranks {W.ranks_text(undumped)} were doing",
                missing=f"their Flight Recorder dumps (dumps read: ranks {W.ranks_text(hang.ranks)})",
                next_command=flight_recorder_command(),
            )
        )
    if not any(s.mismatch for s in hang.stuck):
        compared = sum(len(c) for g in hang.groups.values() for c in g.calls.values())
        if compared and not undumped:
            out.append(
                RuledOut(
                    rule="hang-mismatch",
                    hypothesis="ranks issued different collectives at one sequence number",
                    reason=f"every sequence number compared has the same operation, sizes and dtypes "
                    f"on every rank that issued it ({compared} calls)",
                )
            )
    out.append(
        NotChecked(
            rule="hang-mismatch",
            hypothesis="every rank reduces with the same operation (sum, max, ...)",
            missing="the reduction: the Flight Recorder does not record it",
        )
    )
    if not ev.nccl_logs and any(s.agreed for s in hang.stuck):
        out.append(
            NotChecked(
                rule="nccl-log",
                hypothesis="NCCL's transport failed below the collectives",
                missing="the ranks' NCCL logs (--nccl-log)",
                next_command=flight_recorder_command(nccl_logs=True),
            )
        )
    return out


RULES = (hang_findings,)
