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

from collections.abc import Iterable
from dataclasses import dataclass

from ncclprobe.diagnose.commands import flight_recorder_command
from ncclprobe.diagnose.hang.rank_exits import RankExit, others, own_exits, timed_out
from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.hang.job_log import Fingerprint, WatchdogStatus, WatchdogTimeout
from ncclprobe.findings import Finding, NotChecked
from ncclprobe.rank_ranges import rank_word
from ncclprobe.secrets import mask_env_value


@dataclass(frozen=True)
class LogStuck:
    """One collective (group, seq) some ranks timed out in, with every rank's own numbers."""

    group: str | None
    seq: int | None
    label: str
    calls: dict  # rank -> its WatchdogTimeout there
    silent: tuple[int, ...]  # ranks seen in the log without a timeout there
    behind: dict  # silent rank -> its last enqueued work (its dump-signal line)
    completed: dict  # rank -> last completed work (its status line there)
    enqueued: dict  # rank -> last enqueued work (its status line there)

    @property
    def mismatch(self) -> bool:
        return len({(t.op, t.numel_in, t.numel_out) for t in self.calls.values()}) > 1

    @property
    def because(self) -> str:
        """As the dump reading says it: missing, mismatch or agreed."""
        return "mismatch" if self.mismatch else "missing" if self.silent else "agreed"

    @property
    def never_completed(self) -> bool:
        """No rank in it ever completed a collective of the group: the first one never finished."""
        if self.seq == 1:
            return True
        return (
            bool(self.completed)
            and len(self.completed) == len(self.calls)
            and all(done is None or done <= 0 for done in self.completed.values())
        )


def log_only_findings(ev: E.Evidence) -> list:
    stuck = stuck_collectives(ev)
    cycles = _cycles(ev, stuck)
    in_cycle = {id(s) for cycle in cycles for s, _, _ in cycle}
    out: list = [_cycle_finding(c) for c in cycles]
    comms = tuple(c for log in ev.job_logs for c in log.nccl_comms)
    exits = own_exits(ev)
    out += [_watchdog(s, _transport(ev), comms, exits) for s in stuck if id(s) not in in_cycle]
    out += [] if stuck else _status_only(ev)
    out += detail_findings(ev)
    gloo = {r: ms for log in ev.job_logs for r, ms in log.gloo_timeouts.items()}
    if gloo and not out:
        out.append(
            Finding(
                rule="hang-watchdog",
                severity="warning",
                confidence="low",
                title=f"gloo timed out on {_ranks(gloo)} after {max(gloo.values())} ms waiting for a peer",
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
                f"; the log says the Flight Recorder was disabled on {_ranks(disabled)}"
                if disabled
                else ""
            ),
            next_command=flight_recorder_command(nccl_logs=not ev.nccl_logs),
        )
    )
    return out


def stuck_collectives(ev: E.Evidence) -> list[LogStuck]:
    """Every (group, seq) a watchdog timed out in, with each rank's call, status and silence."""
    known = _known_ranks(ev)
    out = []
    for (group, seq), ranks in sorted(_by_collective(ev).items(), key=lambda kv: kv[0][1] or 0):
        first = next(iter(ranks.values()))
        silent = tuple(sorted(known - set(ranks)))
        statuses = [
            s
            for log in ev.job_logs
            for s in log.statuses
            if s.seq == seq and (s.group is None or group is None or s.group == group)
        ]
        behind = {
            s.rank: s.last_enqueued
            for log in ev.job_logs
            for s in log.statuses
            if s.seq is None
            and s.rank in silent
            and (group is None or s.group == group)
            and s.last_enqueued < (seq or 0)
        }
        out.append(
            LogStuck(
                group=group,
                seq=seq,
                label=first.group_desc or (f"PG {group}" if group is not None else "its group"),
                calls=ranks,
                silent=silent,
                behind=behind,
                completed={s.rank: s.last_completed for s in statuses if s.rank in ranks},
                enqueued={s.rank: s.last_enqueued for s in statuses if s.rank in ranks},
            )
        )
    return out


def _watchdog(
    s: LogStuck, transport: str = "", comms: tuple = (), exits: dict[int, RankExit] | None = None
) -> Finding:
    ranks, first = s.calls, next(iter(s.calls.values()))
    evidence = {
        "group": s.group,
        "seq": s.seq,
        "op": first.op,
        "because": s.because,
        "timed_out_ranks": sorted(ranks),
        "silent_ranks": list(s.silent),
        "timeout_ms": first.timeout_ms,
        "ran_ms": {str(r): t.ran_ms for r, t in sorted(ranks.items())},
        "calls": {str(r): _call(t) for r, t in sorted(ranks.items())},
        "last_enqueued": {str(r): n for r, n in sorted(s.enqueued.items())},
        "last_completed": {str(r): n for r, n in sorted(s.completed.items())},
        "silent_last_enqueued": {str(r): n for r, n in sorted(s.behind.items())},
    }
    ran = max(t.ran_ms or 0 for t in ranks.values())
    if s.mismatch:
        return _mismatch(s, evidence)
    what = f"{first.op} #{s.seq} of {s.label} ({_numel(first.numel_in)} elements)"
    if s.silent and set(s.behind) == set(s.silent):
        return Finding(
            rule="hang-watchdog",
            severity="error",
            confidence="high",
            title=f"{_ranks(s.silent)} never entered {what} that {_ranks(ranks)} timed out in",
            detail=(
                f"The watchdog of {_ranks(ranks)} gave up on {what} after {ran} ms; "
                + "; ".join(
                    f"rank {r}'s log says its last enqueued work is {n}"
                    for r, n in sorted(s.behind.items())
                )
                + f" (the line torch prints when a peer's timeout makes it dump): it never enqueued #{s.seq}."
            ),
            evidence=evidence,
        )
    dead = [exits[r] for r in s.silent if exits and r in exits]
    if s.silent and len(dead) == len(s.silent):
        said = "; ".join(x.said for x in dead)
        return Finding(
            rule="hang-watchdog",
            severity="error",
            confidence="high" if all(x.exitcode is not None for x in dead) else "medium",
            title=f"{_ranks(ranks)} timed out in {what}, which {_ranks(s.silent)} never entered: {said}",
            detail=(
                f"The watchdog of {_ranks(ranks)} gave up on {what} after {ran} ms. "
                + said[:1].upper()
                + said[1:]
                + "".join(f" (raised at {x.raised_at})" for x in dead if x.raised_at)
                + f", logging no collective failure of {'its' if len(dead) == 1 else 'their'} own: "
                f"{'it' if len(dead) == 1 else 'they'} died "
                + (
                    f"in {'its' if len(dead) == 1 else 'their'} own code "
                    if all(x.exception and not x.signal for x in dead)
                    else ""
                )
                + "before this call, and the others waited."
            ),
            evidence={**evidence, "exited_ranks": [x.rank for x in dead]},
        )
    if s.silent:
        return Finding(
            rule="hang-watchdog",
            severity="error",
            confidence="medium",
            title=f"{_ranks(ranks)} timed out in {what}; {_ranks(s.silent)} logged no timeout: "
            f"{'it' if len(s.silent) == 1 else 'they'} likely never entered it",
            detail=(
                f"The watchdog of {_ranks(ranks)} gave up on {what} after {ran} ms. A rank logs a "
                f"timeout only for a collective it enqueued, so {_ranks(s.silent)}, seen in the log "
                "without one, probably never enqueued it (inferred: a rank that died first or whose "
                "log is cut looks the same; the Flight Recorder dumps would show it)."
            ),
            evidence=evidence,
        )
    if s.never_completed:
        return Finding(
            rule="hang-first-collective",
            severity="error",
            confidence="medium",
            title=f"the first collective of {s.label} never completed: every rank in the log "
            f"timed out in {what}, the same call on each",
            detail=(
                f"{_ranks(ranks).capitalize()} entered {what} with the same call and none of them "
                "ever completed a collective of the group (last completed work "
                + (
                    ", ".join(f"{_done(n)} on rank {r}" for r, n in sorted(s.completed.items()))
                    if s.completed
                    else f"none before #{s.seq}"
                )
                + "). The ranks are not out of step: the group's communicator never moved data. "
                "NCCL creates its communicator and connects the ranks at the first collective, so "
                "this reads as a hang in NCCL's init or transport setup (a network path that does "
                "not connect, an interface the peers cannot reach, a transport that blocks); the "
                "NCCL logs of the ranks (NCCL_DEBUG=INFO) show how far each got. "
                + _first_caveats(s, first.op, comms)
                + (
                    f"The log's NCCL lines show the transport in play: {transport}."
                    if transport
                    else "The log holds no NCCL line naming the network or a transport setting."
                )
            ),
            evidence=evidence,
            next_command="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV NCCL_DEBUG_FILE=nccl-%h-%p.log "
            "<the job>, then: ncclprobe diagnose --log LOG --nccl-log nccl-*.log",
        )
    return Finding(
        rule="hang-watchdog",
        severity="warning",
        confidence="medium",
        title=f"every rank in the log timed out in {what}, the same call on each",
        detail=(
            f"{_ranks(ranks).capitalize()} timed out in the same collective with the same call: the "
            "log shows no rank missing from it and no call that differs. Ranks that logged nothing "
            "at all are not in this count."
        ),
        evidence=evidence,
    )


def _first_caveats(s: LogStuck, op: str | None, comms: tuple) -> str:
    """What else the same lines allow: a point-to-point first operation whose peer never posted
    its match; a member absent from the log; NCCL's own word that init completed."""
    out = []
    if op and "COALESCED" in op.upper():
        out.append(
            f"{op} is a batch of coalesced operations (batch_isend_irecv's sends and receives, or "
            "coalesced collectives): where it holds sends and receives, it also never completes "
            "where a peer never posts the matching receive or send."
        )
    elif op and any(word in op.upper() for word in ("SEND", "RECV")):
        out.append(
            f"{op} is point-to-point: it also never completes where the peer never posts the "
            "matching receive or send."
        )
    done = [c for c in comms if c.get("init_complete")]
    if done:
        sizes = sorted({c["nranks"] for c in done})
        out.append(
            "NCCL's lines in the log show a communicator's init completed ("
            + "; ".join(f"rank {c['rank']} of {c['nranks']}" for c in done[:4])
            + "): where that is this group's communicator, the hang is after init, in the first "
            "collective's connection setup or transfer."
        )
        missing = [n for n in sizes if n > len(s.calls)]
        if missing:
            out.append(
                f"The log shows {len(s.calls)} of its {missing[-1]} ranks: a member absent from the "
                "log may not have entered the collective (not observable here)."
            )
    return " ".join(out) + (" " if out else "")


def _transport(ev: E.Evidence) -> str:
    """`network AWS Libfabric; NCCL_NET_GDR_LEVEL=PHB`: what NCCL's lines in the logs say."""
    seen: dict[str, str] = {}
    for log in ev.job_logs:
        for key, value in log.transport.items():
            seen.setdefault(key, value)
    networks = sorted({n for rank_log in ev.nccl_logs for n in rank_log.log.networks})
    if networks:  # the ranks' own NCCL logs (--nccl-log), beside the job's
        seen.setdefault("network", ", ".join(networks))
    parts = [f"network {seen.pop('network')}"] if "network" in seen else []
    missing = seen.pop("net_plugin_missing", None)
    parts += [f"{k}={mask_env_value(k, v)} (set by environment)" for k, v in sorted(seen.items())]
    parts += [f"no network plugin found (`{missing}`)"] if missing else []
    return "; ".join(parts)


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
        + f": last enqueued work #{st.last_enqueued}, last completed {_done(st.last_completed)}"
        + (
            f" (#{st.last_completed + 1}-#{st.last_enqueued} enqueued, not completed)"
            if st.last_completed is not None and st.last_enqueued > st.last_completed
            else ""
        )
        for r, st in sorted(statuses.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    ]
    if failed:
        said.append(f"{_ranks(failed)} said some NCCL operations failed or timed out")
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


def _done(n: int | None) -> str:
    """A last completed work: `#12`, or none where PyTorch printed -1 or an impossible value."""
    return f"#{n}" if n is not None and n > 0 else "none"


def _mismatch(s: LogStuck, evidence: dict) -> Finding:
    ops = {t.op for t in s.calls.values()}
    differs = "operation" if len(ops) > 1 else "size"
    calls = "; ".join(f"rank {r}: {_call(t)}" for r, t in sorted(s.calls.items()))
    why = (
        "The ranks issue collectives in different orders, or some rank issues a collective the "
        "others do not (the dumps tell a swap, where each call shows up later on the other rank)"
        if differs == "operation"
        else "The ranks pass tensors of different sizes to the same collective"
    )
    return Finding(
        rule="hang-mismatch",
        severity="error",
        confidence="high",
        title=f"#{s.seq} of {s.label} differs between ranks ({differs}): {calls}",
        detail=(
            f"A group's collective #{s.seq} must be the same call on every member; the watchdog "
            f"lines of the ranks show different calls there: {calls}. {why}."
        ),
        evidence={**evidence, "differs_in": differs},
    )


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
            f"rank {r}: {f.op} of {_numel(f.numel)} elements" for r, f in sorted(by_rank.items())
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
                title=f"{_ranks(missing)} never reached the next collective: "
                "TORCH_DISTRIBUTED_DEBUG=DETAIL's monitored barrier before it timed out "
                f"after {max(missing.values())} ms",
                detail="Before each collective DETAIL's check waits for every rank at a barrier; "
                f"{_ranks(missing)} did not arrive, so {'it' if len(missing) == 1 else 'they'} never "
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
    for (group, seq), ranks in _by_collective(ev).items():
        first = next(iter(ranks.values()))
        ops = "/".join(sorted({t.op or "?" for t in ranks.values()}))
        notes.append(
            f"log: the watchdog of {_ranks(ranks)} timed out in {ops} #{seq} "
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


def _by_collective(ev: E.Evidence) -> dict[tuple, dict]:
    """(group, seq) -> {rank: its watchdog timeout}, over every log: one sequence number of a group
    is one collective, whatever each rank issued there. A rank's timeout in a collective it issued
    after its first timeout had fired is left out: the job had already failed there (a rank that
    outlives its first timeout goes on to its next call, which times out too), so it says nothing
    of where the rank waited (`_after_first`)."""
    out: dict[tuple, dict] = {}
    for log in ev.job_logs:
        firsts: dict = {}
        for t in log.timeouts:
            if not _after_first(t, firsts.setdefault(t.rank, t)):
                out.setdefault((t.group, t.seq), {}).setdefault(t.rank, t)
    for by_rank in out.values():  # a line that named no rank, beside ranks that did: not a rank
        if None in by_rank and len(by_rank) > 1:
            del by_rank[None]
    for seq in [n for g, n in out if g is None]:
        _join_unnamed(out, seq)
    return out


def _join_unnamed(out: dict[tuple, dict], seq: int | None) -> None:
    """Timeouts at `seq` whose lines named no group join the one group that timed out at `seq` in
    the same call; with two candidate groups, or another call, they stay apart (and in no cycle:
    their group is unknown, not another one)."""
    named = [g for g, n in out if g is not None and n == seq]
    if len(named) != 1:
        return
    unnamed, there = out[(None, seq)], out[(named[0], seq)]
    if len({_call(t) for t in (*unnamed.values(), *there.values())}) == 1:
        for rank, t in out.pop((None, seq)).items():
            there.setdefault(rank, t)


def _after_first(t: WatchdogTimeout, first: WatchdogTimeout) -> bool:
    """Whether `t` is a collective its rank issued (line clock less its run time) after the rank's
    first timeout (`first`), in another collective, had fired; False where a clock is not printed."""
    if first is t or (first.group, first.seq) == (t.group, t.seq):
        return False
    fired, now = _clock_s(first.time), _clock_s(t.time)
    if fired is None or now is None or t.ran_ms is None:
        return False
    return now - t.ran_ms / 1000 > fired


def _clock_s(clock: str | None) -> float | None:
    """A glog clock ("1206 23:48:26.698078929": month, day, time) as seconds, for ordering within
    one job (month lengths do not matter there); None where absent or not of that form."""
    if not clock:
        return None
    md, _, hms = clock.partition(" ")
    h, m, sec = (hms.split(":") + ["", ""])[:3]
    try:
        return (int(md[:2]) * 31 + int(md[2:])) * 86400 + int(h) * 3600 + int(m) * 60 + float(sec)
    except ValueError:
        return None


def _known_ranks(ev: E.Evidence) -> set[int]:
    ranks = {r for log in ev.job_logs for r in log.ranks}
    ranks |= {f.rank for log in ev.job_logs for f in log.failures if f.rank is not None}
    return ranks


def _call(t: WatchdogTimeout) -> str:
    out = f"{t.op} of {_numel(t.numel_in)} elements"
    return out if t.numel_out in (None, t.numel_in) else f"{out} in, {_numel(t.numel_out)} out"


def _numel(n: int | None) -> str:
    return f"{n:,}" if n is not None else "?"


def _ranks(ranks: Iterable[int | None]) -> str:
    """`rank 3`, `ranks 0-84, 86-1023 (1023 ranks)`: ranges, so 1,024 ranks stay one line."""
    return rank_word(r for r in ranks if r is not None)
