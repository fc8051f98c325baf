"""The finding for one collective a job's log shows ranks timed out in: a rank that never entered it
(its own dump-signal line, its exit, or its silence), calls that differ, or a first collective that
never completed (NCCL's init or transport setup, with the transport the logs name).

It lives apart from `rules_hang_log` (which gathers the log-only findings) because wording one
stuck collective, with its caveats, is one concern of its own.
"""

from __future__ import annotations

from ncclprobe.diagnose.hang import log_collectives as C
from ncclprobe.diagnose.hang.log_collectives import LogStuck
from ncclprobe.diagnose.hang.rank_exits import RankExit
from ncclprobe.evidence import bundle as E
from ncclprobe.findings import Finding
from ncclprobe.secrets import mask_env_value


def watchdog(
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
        "calls": {str(r): C.call(t) for r, t in sorted(ranks.items())},
        "last_enqueued": {str(r): n for r, n in sorted(s.enqueued.items())},
        "last_completed": {str(r): n for r, n in sorted(s.completed.items())},
        "silent_last_enqueued": {str(r): n for r, n in sorted(s.behind.items())},
    }
    ran = max(t.ran_ms or 0 for t in ranks.values())
    if s.mismatch:
        return _mismatch(s, evidence)
    what = f"{first.op} #{s.seq} of {s.label} ({C.numel(first.numel_in)} elements)"
    if s.silent and set(s.behind) == set(s.silent):
        return Finding(
            rule="hang-watchdog",
            severity="error",
            confidence="high",
            title=f"{C.ranks(s.silent)} never entered {what} that {C.ranks(ranks)} timed out in",
            detail=(
                f"The watchdog of {C.ranks(ranks)} gave up on {what} after {ran} ms; "
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
            title=f"{C.ranks(ranks)} timed out in {what}, which {C.ranks(s.silent)} never entered: {said}",
            detail=(
                f"The watchdog of {C.ranks(ranks)} gave up on {what} after {ran} ms. "
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
            title=f"{C.ranks(ranks)} timed out in {what}; {C.ranks(s.silent)} logged no timeout: "
            f"{'it' if len(s.silent) == 1 else 'they'} likely never entered it",
            detail=(
                f"The watchdog of {C.ranks(ranks)} gave up on {what} after {ran} ms. A rank logs a "
                f"timeout only for a collective it enqueued, so {C.ranks(s.silent)}, seen in the log "
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
                f"{C.ranks(ranks).capitalize()} entered {what} with the same call and none of them "
                "ever completed a collective of the group (last completed work "
                + (
                    ", ".join(f"{C.done(n)} on rank {r}" for r, n in sorted(s.completed.items()))
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
            f"{C.ranks(ranks).capitalize()} timed out in the same collective with the same call: the "
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


def transport(ev: E.Evidence) -> str:
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


def _mismatch(s: LogStuck, evidence: dict) -> Finding:
    ops = {t.op for t in s.calls.values()}
    differs = "operation" if len(ops) > 1 else "size"
    calls = "; ".join(f"rank {r}: {C.call(t)}" for r, t in sorted(s.calls.items()))
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
