"""What the NCCL debug logs of a job's ranks show, rank against rank (`diagnose --nccl-log`): a
rank whose communicator never finished init, WARN lines (transport and network errors name
themselves there), and settings NCCL read with different values on different ranks.

NCCL's INFO lines carry no clock, and its WARN lines one only from NCCL 2.26 on (and only if the
log kept it), so when a WARN came relative to a hang is not read here: each WARN is reported as
the log's own words, with its position (before or after the rank's last `Init COMPLETE`) unknown.
"""

from __future__ import annotations

from ncclprobe.diagnose import evidence as E
from ncclprobe.diagnose.findings import Finding, RuledOut
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
    out = []
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
    out = []
    for log in ev.nccl_logs:
        warns = log.log.warnings
        if not warns:
            continue
        transport = [w for w in warns if any(word in w for word in TRANSPORT_WORDS)]
        shown = transport or warns
        out.append(
            Finding(
                rule="nccl-warn",
                severity="warning",
                confidence="medium" if transport else "low",
                title=f"{log.label}'s NCCL log has {len(warns)} WARN line(s)"
                + (f", {len(transport)} about the transport or network" if transport else "")
                + f": {mask_text(shown[0])[:160]}",
                detail=(
                    f"{log.path}: "
                    + "; ".join(mask_text(w)[:200] for w in shown[:3])
                    + ". NCCL's log does not say when a line came relative to the hang: a transport "
                    "error can be the cause, or the consequence of the watchdog aborting the communicator."
                ),
                evidence={
                    "log": log.path,
                    "rank": log.rank,
                    "warnings": [mask_text(w) for w in shown[:10]],
                },
            )
        )
    return out


def _settings(ev: E.Evidence) -> list:
    if len(ev.nccl_logs) < 2:
        return []
    names = sorted({k for log in ev.nccl_logs for k in log.log.env} - set(DIFFERS_PER_RANK))
    differ = {}
    for name in names:
        values = {log.label: log.log.env.get(name) for log in ev.nccl_logs}
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
                f"({len(names)} variables"
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
