"""What a job's log says about a hang by itself (no Flight Recorder dumps), and the notes it adds
beside them.

The watchdog of a rank logs a timeout only for a collective that rank enqueued, so a rank that
never enqueued the collective the others timed out in logs none: the log alone points at the
silent ranks, but only as an inference (a rank may also have died first, or its log be cut). The
Flight Recorder turns that into a reading, so a log-only diagnosis always asks for the dumps.
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import flight_recorder_command
from ncclprobe.evidence import bundle as E
from ncclprobe.findings import Finding, NotChecked
from ncclprobe.rank_ranges import rank_word


def log_only_findings(ev: E.Evidence) -> list:
    out: list = []
    timeouts = _by_collective(ev)
    known = _known_ranks(ev)
    for (group, seq, op), ranks in sorted(timeouts.items(), key=lambda kv: kv[0][1] or 0):
        out.append(_watchdog(ev, group, seq, op, ranks, known))
    gloo = {r: ms for log in ev.job_logs for r, ms in log.gloo_timeouts.items()}
    if gloo and not timeouts:
        out.append(
            Finding(
                rule="hang-watchdog",
                severity="warning",
                confidence="low",
                title=f"gloo timed out on {_ranks(gloo)} after {max(gloo.values())} ms waiting for a peer",
                detail="gloo's timeout names neither the collective nor its sequence number: which rank "
                "did not join cannot be read from the log.",
                evidence={"gloo_timeout_ms": {str(r): ms for r, ms in sorted(gloo.items())}},
            )
        )
    if not out and not any(log.hang_seen for log in ev.job_logs):
        out.append(
            Finding(
                rule="hang-log-clean",
                severity="info",
                confidence="medium",
                title="the log shows no watchdog timeout, gloo timeout or failed rank",
                detail=f"Read {sum(log.lines for log in ev.job_logs)} lines; none says the job hung.",
                evidence={"lines": sum(log.lines for log in ev.job_logs)},
            )
        )
    disabled = sorted({r for log in ev.job_logs for r in log.fr_disabled})
    out.append(
        NotChecked(
            rule="hang-dumps",
            hypothesis="which rank did not enter the collective, and what each rank last did",
            missing="the ranks' Flight Recorder dumps (--flight-recorder)"
            + (
                f"; the log says the Flight Recorder was disabled on {_ranks(disabled)}"
                if disabled
                else ""
            ),
            next_command=flight_recorder_command(nccl_logs=not ev.nccl_logs),
        )
    )
    return out


def _watchdog(ev, group, seq, op, ranks: dict, known: set) -> Finding:
    silent = sorted(known - set(ranks))
    first = next(iter(ranks.values()))
    label = first.group_desc or (f"PG {group}" if group is not None else "its group")
    status = {
        s.rank: s
        for log in ev.job_logs
        for s in log.statuses
        if s.seq == seq and (s.group is None or group is None or s.group == group)
    }
    # a rank told to dump by a peer logs how far it got: a reading, where it is there
    behind = {
        s.rank: s.last_enqueued
        for log in ev.job_logs
        for s in log.statuses
        if s.seq is None
        and s.rank in silent
        and (group is None or s.group == group)
        and s.last_enqueued < (seq or 0)
    }
    evidence = {
        "group": group,
        "seq": seq,
        "op": op,
        "timed_out_ranks": sorted(ranks),
        "silent_ranks": silent,
        "timeout_ms": first.timeout_ms,
        "ran_ms": {str(r): t.ran_ms for r, t in sorted(ranks.items())},
        "last_enqueued": {str(r): s.last_enqueued for r, s in sorted(status.items())},
        "last_completed": {str(r): s.last_completed for r, s in sorted(status.items())},
        "silent_last_enqueued": {str(r): n for r, n in sorted(behind.items())},
    }
    numel = f"{first.numel_in:,}" if first.numel_in is not None else "?"
    what = f"{op} #{seq} of {label} ({numel} elements)"
    if silent and set(behind) == set(silent):
        return Finding(
            rule="hang-watchdog",
            severity="error",
            confidence="high",
            title=f"{_ranks(silent)} never entered {what} that {_ranks(ranks)} timed out in",
            detail=(
                f"The watchdog of {_ranks(ranks)} gave up on {what} after "
                f"{max(t.ran_ms or 0 for t in ranks.values())} ms; "
                + "; ".join(
                    f"rank {r}'s log says its last enqueued work is {n}"
                    for r, n in sorted(behind.items())
                )
                + f" (the line torch prints when a peer's timeout makes it dump): it never enqueued #{seq}."
            ),
            evidence=evidence,
        )
    if silent:
        return Finding(
            rule="hang-watchdog",
            severity="error",
            confidence="medium",
            title=f"{_ranks(ranks)} timed out in {what}; {_ranks(silent)} logged no timeout: "
            f"{'it' if len(silent) == 1 else 'they'} likely never entered it",
            detail=(
                f"The watchdog of {_ranks(ranks)} gave up on {what} after "
                f"{max(t.ran_ms or 0 for t in ranks.values())} ms. A rank logs a timeout only for a "
                f"collective it enqueued, so {_ranks(silent)}, seen in the log without one, probably never "
                "enqueued it (inferred: a rank that died first or whose log is cut looks the same; the "
                "Flight Recorder dumps would show it)."
            ),
            evidence=evidence,
        )
    return Finding(
        rule="hang-watchdog",
        severity="warning",
        confidence="medium",
        title=f"every rank in the log timed out in {what}",
        detail=(
            f"{_ranks(ranks).capitalize()} timed out in the same collective: the log shows no rank "
            "missing from it. Ranks that logged nothing at all are not in this count."
        ),
        evidence=evidence,
    )


def log_notes(ev: E.Evidence) -> list[str]:
    """One line per fact of the logs that the dumps do not carry: timeouts and the launcher's verdict."""
    notes = []
    for (group, seq, op), ranks in _by_collective(ev).items():
        first = next(iter(ranks.values()))
        notes.append(
            f"log: the watchdog of {_ranks(ranks)} timed out in {op} #{seq} "
            f"(PG {group if group is not None else '?'}{', ' + first.group_desc if first.group_desc else ''}) "
            f"after {max(t.ran_ms or 0 for t in ranks.values())} ms (timeout {first.timeout_ms} ms)"
        )
    for log in ev.job_logs:
        root = [f for f in log.failures if f.root_cause]
        for f in root[:1]:
            how = f"signal {f.signal}" if f.signal else f"exit code {f.exitcode}"
            notes.append(
                f"log: torchrun's first observed failure is rank {f.rank} ({how}): the first rank to "
                "fail is often the one that gave up waiting, not the cause"
            )
        for r, ms in sorted(log.gloo_timeouts.items()):
            notes.append(f"log: rank {r}'s gloo collective timed out after {ms} ms")
    return list(dict.fromkeys(notes))


def _by_collective(ev: E.Evidence) -> dict[tuple, dict]:
    """(group, seq, op) -> {rank: its watchdog timeout}, over every log."""
    out: dict[tuple, dict] = {}
    for log in ev.job_logs:
        for t in log.timeouts:
            out.setdefault((t.group, t.seq, t.op), {}).setdefault(t.rank, t)
    return out


def _known_ranks(ev: E.Evidence) -> set[int]:
    ranks = {r for log in ev.job_logs for r in log.ranks}
    ranks |= {f.rank for log in ev.job_logs for f in log.failures if f.rank is not None}
    return ranks


def _ranks(ranks) -> str:
    """`rank 3`, `ranks 0-84, 86-1023 (1023 ranks)`: ranges, so 1,024 ranks stay one line."""
    return rank_word(r for r in ranks if r is not None)
