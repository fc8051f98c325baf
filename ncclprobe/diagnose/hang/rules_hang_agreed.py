"""The dumps' verdict where no member is missing and no call differs: every member in one collective
with the same call (behind another group's older collective, in flight, or hung below the
collectives), or nothing pending at all (with the members that issued fewer calls named).

It lives apart from `rules_hang`, whose findings name a cause, because these say what is only a
symptom or that the dumps show none, and how far that verdict goes.
"""

from __future__ import annotations

from ncclprobe.diagnose.hang import hang as H
from ncclprobe.diagnose.hang import hang_words as W
from ncclprobe.diagnose.hang.rules_hang_detail import not_cleared, unrecorded_barrier
from ncclprobe.findings import Finding


def agreed(hang: H.Hang, stuck: H.Stuck, hung: bool) -> Finding:
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


def all_done(hang: H.Hang, hung: bool, logs: bool = False) -> Finding:
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
