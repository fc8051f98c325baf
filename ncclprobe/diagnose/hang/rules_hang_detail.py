"""What the dumps of a TORCH_DISTRIBUTED_DEBUG=DETAIL job say that no other dump does: a check that
ran and raised, and a barrier they cannot show, so that dumps alone never clear such a job
(`hang_detail` reads them)."""

from __future__ import annotations

from ncclprobe.diagnose.hang import hang as H
from ncclprobe.diagnose.hang import hang_words as W
from ncclprobe.findings import Finding


def check_failed(stuck: H.Stuck) -> Finding:
    """DETAIL's check of a group's next collective ran to its end on every member, and none issued
    the collective: the check raised, so the ranks' calls there differ."""
    group, seq, check = stuck.group, stuck.seq, stuck.check
    assert check is not None
    members = W.rank_word(group.dumped)
    return Finding(
        rule="hang-mismatch",
        severity="error",
        confidence="high",
        title=f"collective {seq} of {group.label} differs between ranks: TORCH_DISTRIBUTED_DEBUG=DETAIL's "
        f"check of it ran on every member and none issued it",
        detail=(
            f"With DETAIL, each collective is first checked across its group: its fingerprint "
            f"(operation, sizes, dtypes, sequence number) is all-gathered through a gloo group of its "
            f"own ({check.label}), and the collective is issued only where every rank's is the same. "
            f"On {members} that check ran to its end after #{seq - 1} (#{stuck.check_seq} of "
            f"{check.label}, completed) and none issued #{seq}: the check raised, so the ranks' calls "
            f"at #{seq} differ. The dumps do not hold the fingerprints: which way they differ "
            "(operation, sizes, dtypes) is in the ranks' logs, `Detected mismatch between collectives "
            "on ranks` (give them with --log)."
        ),
        evidence={
            "group": group.name,
            "group_desc": group.desc,
            "seq": seq,
            "differs_in": ["arguments"],
            "calls": {},
            "checked_by": check.name,
            "check_seq": stuck.check_seq,
        },
    )


def unrecorded_barrier(hang: H.Hang) -> str:
    """The sentence a 'nothing pending' finding adds where DETAIL's checks are in the dumps."""
    if not any(g.checks for g in hang.groups.values()):
        return ""
    return (
        " With TORCH_DISTRIBUTED_DEBUG=DETAIL a rank that never reached the next collective's check "
        "leaves no trace here (the check's monitored barrier is not recorded): the ranks' logs name "
        "it (`failed to pass monitoredBarrier`)."
    )


def not_cleared(title: str, calls: int, ranks: list[int]) -> Finding:
    """Nothing pending in a DETAIL job's dumps, and no log: no clean verdict. A rank that never
    reached the next check leaves no trace, so the dumps of that hang and of a job that ended
    cleanly read the same (the recorded gloo3-detail skip and healthy jobs)."""
    return Finding(
        rule="hang-none-pending",
        severity="warning",
        confidence="medium",
        title=f"{title}: not a clean verdict, TORCH_DISTRIBUTED_DEBUG=DETAIL hides a rank that "
        "never reached the next collective",
        detail=(
            "Nothing is pending in the dumps, and with DETAIL that does not clear the job: before "
            "each collective DETAIL's check waits for every rank at a monitored barrier that the "
            "recorder does not keep, so the others wait there, unrecorded, for a rank that never "
            "arrives, and no dump shows it. The dumps of such a job and of one that ended cleanly "
            "read the same; the ranks' logs tell them apart (`failed to pass monitoredBarrier` "
            "names the rank that never arrived): give them with --log beside the dumps."
        ),
        evidence={"calls": calls, "ranks": ranks, "checked": True},
    )
