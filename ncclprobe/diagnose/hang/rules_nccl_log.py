"""What the NCCL debug logs of a job's ranks show, rank against rank (`diagnose --nccl-log`): a
rank whose communicator never finished init, WARN lines (transport and network errors name
themselves there), and settings NCCL read with different values on different ranks.

NCCL's INFO lines carry no clock; its WARN lines one from NCCL 2.26 on (`[%F %T]`, the host's
local time). Where both a WARN's time and the Flight Recorder's stuck collective are known, the WARN
is placed against it: before the collective was issued, within its timeout, or after the watchdog
gave up (then likely a consequence of the abort). That reads the log's clock as UTC, as torch's
`time_created_ns` is: said in the finding, since a host in another zone shifts it by whole hours.
"""

from __future__ import annotations

import datetime

from ncclprobe.diagnose.hang import hang as H
from ncclprobe.evidence import bundle as E
from ncclprobe.findings import Finding, Outcome, RuledOut
from ncclprobe.nccl.knobs import DIFFERS_PER_RANK
from ncclprobe.secrets import mask_env_value, mask_text

TRANSPORT_WORDS = (
    "NET/",
    "Socket",
    "socket",
    "IB",
    "connect",
    "Connect",
    "timeout",
    "Timeout",
    "remote",
    "Remote",
    "peer",
    "Peer",
    "refused",
    "reset",
    "unreachable",
)


def nccl_log_findings(ev: E.Evidence) -> list:
    if not ev.nccl_logs:
        return []
    return _init(ev) + _warnings(ev) + _settings(ev)


def _init(ev: E.Evidence) -> list:
    out: list[Outcome] = []
    for log in ev.nccl_logs:
        for comm in log.unfinished_inits:
            out.append(
                Finding(
                    rule="nccl-init",
                    severity="error",
                    confidence="high",
                    title=f"{log.label}'s NCCL communicator {comm['comm']} ({comm['nranks']} ranks) never "
                    "finished init",
                    detail=(
                        f"{log.path} has `Init START` for communicator {comm['comm']} (rank {comm['rank']} of "
                        f"{comm['nranks']}) and no `Init COMPLETE`: this rank never got a working "
                        "communicator, so every collective on it waits. Init waits for every rank of the "
                        "communicator: look for a rank that never reached it, or a bootstrap/network error "
                        "in the logs."
                    ),
                    evidence={
                        "log": log.path,
                        "rank": log.rank,
                        "comm": comm["comm"],
                        "nranks": comm["nranks"],
                    },
                )
            )
    if not out and any(log.log.communicators for log in ev.nccl_logs):
        out.append(
            RuledOut(
                rule="nccl-init",
                hypothesis="a rank's NCCL communicator never finished init",
                reason=f"every communicator started in the {len(ev.nccl_logs)} NCCL log(s) logged `Init COMPLETE`",
            )
        )
    return out


def _warnings(ev: E.Evidence) -> list:
    """WARN lines placed against the hang; beside an engine run with no hang evidence the run's
    rule places them (`rules_nccl_run`), so they are not reported twice."""
    if (ev.runs or ev.baseline) and not (ev.flight_recorder or ev.job_logs):
        return []
    out = []
    window = _hang_window(ev)
    for log in ev.nccl_logs:
        warns = list(zip(log.log.warnings, log.log.warning_times))
        if not warns:
            continue
        transport = [(w, t) for w, t in warns if any(word in w for word in TRANSPORT_WORDS)]
        shown = transport or warns
        placed = [_place(t, window) for _, t in shown]
        after = all(p.endswith("timeout") and "after its" in p for p in placed)
        out.append(
            Finding(
                rule="nccl-warn",
                severity="info" if after else "warning",  # all after the timeout: the abort's echo
                confidence="medium" if transport else "low",
                title=f"{log.label}'s NCCL log has {len(warns)} WARN line(s)"
                + (f", {len(transport)} about the transport or network" if transport else "")
                + f": {mask_text(shown[0][0])[:160]}"
                + (f" ({placed[0]})" if placed[0] else ""),
                detail=(
                    f"{log.path}: "
                    + "; ".join(mask_text(w)[:200] + (f" [{t}]" if t else "") for w, t in shown[:3])
                    + ". "
                    + (
                        "Times are the log's clock read as UTC, placed against the stuck collective "
                        "of the Flight Recorder: a WARN after the watchdog's timeout is likely the "
                        "abort's consequence, one before or during it a candidate cause."
                        if window and any(placed)
                        else "Whether these lines come with a stall or a failure of the job is not in "
                        "this evidence: only NCCL's logs were given (the job's log or its Flight "
                        "Recorder dumps would place them)."
                        if not (ev.flight_recorder or ev.job_logs)
                        else "When each line came relative to the hang is not in the evidence (NCCL "
                        "stamps WARN lines from 2.26 on; the Flight Recorder gives the hang's time): "
                        "a transport error can be the cause or the consequence of the watchdog's abort."
                    )
                ),
                evidence={
                    "log": log.path,
                    "rank": log.rank,
                    "warnings": [mask_text(w) for w, _ in shown[:10]],
                    "times": [t for _, t in shown[:10]],
                    "relative_to_hang": placed[:10],
                },
            )
        )
    return out


def _hang_window(ev: E.Evidence) -> tuple[int, int | None] | None:
    """When the first stuck collective (or pending p2p operation) was issued, in ns since the
    epoch, and its timeout in ms."""
    if not ev.flight_recorder:
        return None
    hang = H.build(ev.flight_recorder)
    pending = [c.first for s in hang.stuck for c in s.calls.values()]
    pending += [
        e
        for g in hang.groups.values()
        for es in g.p2p.values()
        for e in es
        if e.state != "completed"
    ]
    created = [(e.time_created_ns, e.timeout_ms) for e in pending if e.time_created_ns]
    return min(created) if created else None


def _place(stamp: str | None, window: tuple[int, int | None] | None) -> str:
    """`12 s after the stuck collective was issued, within its 10 s timeout` and the like; '' when
    either time is unknown."""
    if not stamp or not window:
        return ""
    try:
        when = datetime.datetime.fromisoformat(stamp.replace(",", ".")).replace(
            tzinfo=datetime.timezone.utc
        )
    except ValueError:
        return ""
    offset = when.timestamp() - window[0] / 1e9  # the stamp is a whole second: [offset, offset + 1)
    timeout = (window[1] or 0) / 1000
    if offset + 1 <= 0:
        return f"{-offset:.0f} s before the stuck collective was issued"
    offset = max(offset, 0.0)  # within the second it was issued
    if timeout and offset > timeout:
        return (
            f"{offset:.0f} s after the stuck collective was issued, after its {timeout:g} s timeout"
        )
    return f"{offset:.0f} s after the stuck collective was issued" + (
        f", within its {timeout:g} s timeout" if timeout else ""
    )


def _settings(ev: E.Evidence) -> list:
    if len(ev.nccl_logs) < 2:
        return []
    names = sorted({k for log in ev.nccl_logs for k in log.log.env} - set(DIFFERS_PER_RANK))
    labels = [log.label for log in ev.nccl_logs]
    if len(set(labels)) < len(labels):  # two logs of one rank (or of unknown ranks): name the files
        labels = [log.path for log in ev.nccl_logs]
    differ = {}
    for name in names:
        values = {label: log.log.env.get(name) for label, log in zip(labels, ev.nccl_logs)}
        if len(set(values.values())) > 1:
            differ[name] = {
                k: mask_env_value(name, v) if v is not None else None for k, v in values.items()
            }
    if not differ:
        return [
            RuledOut(
                rule="nccl-settings-differ",
                hypothesis="NCCL read different settings on different ranks",
                reason=f"the {len(ev.nccl_logs)} NCCL logs report the same value for every variable NCCL read "
                f"({len(names)} variable(s)"
                + (f"; {', '.join(DIFFERS_PER_RANK)} differ by design)" if names else ")"),
            )
        ]
    first = next(iter(differ))
    shown = ", ".join(f"{k}: {v if v is not None else 'unset'}" for k, v in differ[first].items())
    return [
        Finding(
            rule="nccl-settings-differ",
            severity="warning",
            confidence="high",
            title=f"NCCL read different settings on different ranks: {first} ({shown})"
            + (f" and {len(differ) - 1} more" if len(differ) > 1 else ""),
            detail=(
                "The ranks of one job should run NCCL with one configuration; ranks that disagree on "
                "a protocol, algorithm, buffer or transport setting can pick incompatible paths or sizes "
                "and hang. Differences: "
                + "; ".join(
                    f"{n} ({', '.join(f'{k}: {v}' for k, v in vals.items())})"
                    for n, vals in differ.items()
                )
                + ". Set them alike in the environment that starts every rank."
            ),
            evidence={"differ": differ},
        )
    ]


RULES = (nccl_log_findings,)
