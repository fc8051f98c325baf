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
from ncclprobe.diagnose.hang import rules_hang_cycles as CY
from ncclprobe.diagnose.hang.rank_exits import RankExit, exit_findings, own_exits
from ncclprobe.diagnose.hang.rules_hang_agreed import agreed, all_done
from ncclprobe.diagnose.hang.rules_hang_detail import check_failed
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
    cycles, explained = CY.cycles(hang)
    out: list = [CY.cycle_finding(hang, c) for c in cycles]
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
            out.append(agreed(hang, stuck, hung))
    out += from_log + p2p_findings(hang)
    if hang.unreadable:
        out.append(_unreadable(hang))
    if not hang.stuck and not p2p_pending(hang):
        out.append(all_done(hang, hung, logs=bool(ev.job_logs)))
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
