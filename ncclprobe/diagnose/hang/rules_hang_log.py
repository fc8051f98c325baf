"""What a job's log says about a hang by itself (no Flight Recorder dumps), and the notes it adds
beside them.

The log is read as the dumps are (`hang.py`): a group's collective N is the same call on every
member, so the ranks' own numbers at one sequence number tell the cases apart, in the dump
reading's words:
- `mismatch`: the ranks timed out in (or DETAIL's check caught) different calls at the same number:
  another operation (an order swap, or a collective only some ranks issue) or another size;
- `missing`: some ranks timed out in it and others logged none: a rank logs a timeout only for a
  collective it enqueued, so the silent ones likely never entered it (an inference, unless the rank
  told to dump by a peer logged its own last enqueued work, or DETAIL's monitored barrier named it);
- a cycle: each group misses a rank that waits in the other group (each rank's first timeout);
- `agreed`: every rank in it with the same call; where no collective ever completed on any of them
  (last completed work 0 or none everywhere, or the first collective), the communicator never
  worked: a hang in NCCL's init or transport setup, not ranks out of step; the transport settings
  the log shows are named.
A timeout whose line names no group (its status line cut off) joins the one group that timed out
in the same call at the same number, and only then: it is never a group of its own. A log with no
timed-out call but a rank's status (`Last enqueued NCCL work: 855, last completed NCCL work: 12`,
the line of a rank told to dump) or a rank's `Some NCCL operations have failed or timed out` says a
collective timed out, and how far the rank got, but not which collective.
The Flight Recorder turns inferences into readings, so a log-only diagnosis always asks for the dumps.
"""

from __future__ import annotations

from ncclprobe.diagnose.commands import flight_recorder_command
from ncclprobe.diagnose.hang import log_collectives as C
from ncclprobe.diagnose.hang.log_collectives import LogStuck, stuck_collectives
from ncclprobe.diagnose.hang.rank_exits import others, own_exits, timed_out
from ncclprobe.diagnose.hang.rules_log_watchdog import transport, watchdog
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.hang.job_log_records import Fingerprint, WatchdogStatus
from ncclprobe.findings import Finding, NotChecked


def log_only_findings(ev: E.Evidence) -> list:
    stuck = stuck_collectives(ev)
    cycles = _cycles(ev, stuck)
    in_cycle = {id(s) for cycle in cycles for s, _, _ in cycle}
    out: list = [_cycle_finding(c) for c in cycles]
    comms = tuple(c for log in ev.job_logs for c in log.nccl_comms)
    exits = own_exits(ev)
    out += [watchdog(s, transport(ev), comms, exits) for s in stuck if id(s) not in in_cycle]
    out += [] if stuck else _status_only(ev)
    out += detail_findings(ev)
    gloo = {r: ms for log in ev.job_logs for r, ms in log.gloo_timeouts.items()}
    if gloo and not out:
        out.append(
            Finding(
                rule="hang-watchdog",
                severity="warning",
                confidence="low",
                title=f"gloo timed out on {C.ranks(gloo)} after {max(gloo.values())} ms waiting for a peer",
                detail="gloo's timeout names neither the collective nor its sequence number: which rank "
                "did not join cannot be read from the log (TORCH_DISTRIBUTED_DEBUG=DETAIL makes every "
                "rank check each collective against the others and name the mismatch or the missing rank).",
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
                f"; the log says the Flight Recorder was disabled on {C.ranks(disabled)}"
                if disabled
                else ""
            ),
            next_command=flight_recorder_command(nccl_logs=not ev.nccl_logs),
        )
    )
    return out


def _status_only(ev: E.Evidence) -> list[Finding]:
    """A rank's status or `Some NCCL operations have failed or timed out`, with no timed-out call:
    a collective timed out; how far each rank got is read, which collective is not."""
    statuses: dict[int | None, WatchdogStatus] = {}
    for log in ev.job_logs:
        for st in log.statuses:
            statuses.setdefault(st.rank, st)
    failed = {r for log in ev.job_logs for r in log.ops_failed}
    if not statuses and not failed:
        return []
    said = [
        f"rank {r if r is not None else '?'}"
        + (f" ({st.group_desc or 'PG ' + st.group})" if st.group is not None else "")
        + f": last enqueued work #{st.last_enqueued}, last completed {C.done(st.last_completed)}"
        + (
            f" (#{st.last_completed + 1}-#{st.last_enqueued} enqueued, not completed)"
            if st.last_completed is not None and st.last_enqueued > st.last_completed
            else ""
        )
        for r, st in sorted(statuses.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    ]
    if failed:
        said.append(f"{C.ranks(failed)} said some NCCL operations failed or timed out")
    # a rank told to dump names a collective timeout; the watchdog's status alone may be an error
    what = "timed out" if any(log.dump_signals for log in ev.job_logs) else "failed or timed out"
    return [
        Finding(
            rule="hang-watchdog",
            severity="error",
            confidence="medium",
            title=f"a collective {what}: " + "; ".join(said),
            detail=(
                f"The log shows that a collective {what} and how far each rank got ("
                + "; ".join(said)
                + "), but no watchdog line with the timed-out call: which collective, its "
                "sequence number and size are not in the log (the line `Watchdog caught collective "
                "operation timeout: WorkNCCL(...)` of each rank, or the Flight Recorder dumps, name it)."
            ),
            evidence={
                "last_enqueued": {str(r): st.last_enqueued for r, st in statuses.items()},
                "last_completed": {str(r): st.last_completed for r, st in statuses.items()},
                "ops_failed_ranks": sorted(r for r in failed if r is not None),
            },
        )
    ]


def detail_findings(ev: E.Evidence) -> list[Finding]:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL's checks and gloo's size check: the ranks' own numbers (read
    beside the dumps too, which hold DETAIL's checks but not what they compared)."""
    out = []
    prints: dict[int, dict[int, Fingerprint]] = {}
    for log in ev.job_logs:
        for f in log.fingerprints:
            prints.setdefault(f.seq, {}).setdefault(f.rank, f)
    for seq, by_rank in sorted(prints.items()):
        calls = "; ".join(
            f"rank {r}: {f.op} of {C.numel(f.numel)} elements" for r, f in sorted(by_rank.items())
        )
        differs = "operation" if len({f.op for f in by_rank.values()}) > 1 else "size"
        out.append(
            Finding(
                rule="hang-mismatch",
                severity="error",
                confidence="high",
                title=f"collective #{seq} differs between ranks ({differs}): {calls}",
                detail=(
                    "TORCH_DISTRIBUTED_DEBUG=DETAIL checked the ranks' calls before running "
                    f"collective #{seq} (its SequenceNumber={seq - 1} counts from 0) and they "
                    f"differ: {calls}."
                ),
                evidence={
                    "seq": seq,
                    "because": "mismatch",
                    "differs_in": differs,
                    "calls": {str(r): f"{f.op} {f.numel}" for r, f in sorted(by_rank.items())},
                },
            )
        )
    missing = {r: ms for log in ev.job_logs for r, ms in log.barrier_missing.items()}
    if missing:
        out.append(
            Finding(
                rule="hang-watchdog",
                severity="error",
                confidence="high",
                title=f"{C.ranks(missing)} never reached the next collective: "
                "TORCH_DISTRIBUTED_DEBUG=DETAIL's monitored barrier before it timed out "
                f"after {max(missing.values())} ms",
                detail="Before each collective DETAIL's check waits for every rank at a barrier; "
                f"{C.ranks(missing)} did not arrive, so {'it' if len(missing) == 1 else 'they'} never "
                "entered the collective the others wait in.",
                evidence={"because": "missing", "missing_ranks": sorted(missing)},
            )
        )
    sizes = {r: v for log in ev.job_logs for r, v in log.gloo_size_mismatch.items()}
    if sizes:
        seen = "; ".join(
            f"rank {r} received {got:,} bytes where it expected at most {expected:,}"
            for r, (got, expected) in sorted(sizes.items())
        )
        out.append(
            Finding(
                rule="hang-mismatch",
                severity="error",
                confidence="high",
                title=f"the ranks' collective sizes differ (gloo): {seen}",
                detail=f"gloo checks each message against the size its own call expects: {seen} "
                "(`Received data size doesn't match expected size`). The ranks called the same "
                "collective with tensors of different sizes, or different collectives.",
                evidence={"because": "mismatch", "differs_in": "size"},
            )
        )
    return out


def _cycles(ev: E.Evidence, stuck: list[LogStuck]) -> list[list[tuple[LogStuck, int, int]]]:
    """Collectives of different groups whose silent ranks each wait in the other: each rank's
    first timeout is where it waits; a timeout whose group is unknown is in no cycle.
    [(stuck, waiting rank, missing rank)] per cycle."""
    waits: dict[int | None, tuple[str | None, int | None]] = {}  # rank -> (group, seq)
    for log in ev.job_logs:
        for t in log.timeouts:
            waits.setdefault(t.rank, (t.group, t.seq))
    by_key = {(s.group, s.seq): s for s in stuck}
    edges: dict[int, tuple[LogStuck, int, int, LogStuck]] = {}
    for s in stuck:
        for m in s.silent:
            there = by_key.get(waits[m]) if m in waits else None
            waiter = next((r for r in sorted(s.calls) if waits.get(r) == (s.group, s.seq)), None)
            if there is None or s.group is None or there.group is None:
                continue  # a group that is unknown is no other group: no cycle through it
            if there is not s and waiter is not None and waiter != m:
                edges.setdefault(id(s), (s, waiter, m, there))
    cycles: list[list[tuple[LogStuck, int, int]]] = []
    seen: set[int] = set()
    for start in list(edges):
        path: list[tuple[LogStuck, int, int]] = []
        node = start
        while node in edges and node not in {id(p[0]) for p in path}:
            s, waiter, missing, target = edges[node]
            path.append((s, waiter, missing))
            node = id(target)
        if node == start and not ({id(p[0]) for p in path} & seen):
            cycles.append(path)
            seen |= {id(p[0]) for p in path}
    return cycles


def _cycle_finding(cycle: list[tuple[LogStuck, int, int]]) -> Finding:
    links = [
        f"rank {w} waits in {s.label} #{s.seq} ({s.calls[w].op}) for rank {m}" for s, w, m in cycle
    ]
    labels = [s.label for s, _, _ in cycle]
    return Finding(
        rule="hang-groups",
        severity="error",
        confidence="medium",
        title=f"{' and '.join(labels)} wait on each other: " + "; ".join(links),
        detail=(
            "Each rank's first watchdog timeout is in a collective of one group that misses a rank "
            "whose own first timeout is in the other: "
            + "; ".join(links)
            + ". The ranks issue the groups' collectives in different orders and each blocks in "
            "its first (inferred from the log; the dumps show it). Issue collectives of different "
            "groups in one order on every rank."
        ),
        evidence={
            "cycle": [
                {"group": s.group, "seq": s.seq, "waiting_rank": w, "missing_rank": m}
                for s, w, m in cycle
            ]
        },
    )


def log_notes(ev: E.Evidence) -> list[str]:
    """One line per fact of the logs that the dumps do not carry: timeouts and the launcher's verdict."""
    notes = []
    for (group, seq), ranks in C.by_collective(ev).items():
        first = next(iter(ranks.values()))
        ops = "/".join(sorted({t.op or "?" for t in ranks.values()}))
        notes.append(
            f"log: the watchdog of {C.ranks(ranks)} timed out in {ops} #{seq} "
            f"(PG {group if group is not None else '?'}{', ' + first.group_desc if first.group_desc else ''}) "
            f"after {max(t.ran_ms or 0 for t in ranks.values())} ms (timeout {first.timeout_ms} ms)"
        )
    for log in ev.job_logs:
        root = [f for f in log.failures if f.root_cause]
        for f in root[:1]:
            how = f"signal {f.signal}" if f.signal else f"exit code {f.exitcode}"
            rest = others(ev, [f.rank] if f.rank is not None else [])
            gave_up = f.rank not in own_exits(ev) and timed_out(ev)  # nor failed by itself
            notes.append(
                f"log: torchrun's first observed failure is rank {f.rank} ({how})"
                + (
                    ": the first rank to fail is often the one that gave up waiting, not the cause"
                    if gave_up
                    else (f"; {rest}" if rest else "")
                )
            )
        for r, ms in sorted(log.gloo_timeouts.items()):
            notes.append(f"log: rank {r}'s gloo collective timed out after {ms} ms")
    return list(dict.fromkeys(notes))
