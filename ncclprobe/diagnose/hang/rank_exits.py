"""A rank that failed by itself: its own exception, not a collective's, took it down, and the others
then waited for it until the launcher stopped them.

A hang's missing rank is often no rank in host code but a dead one. The job's log says which:
- torchrun's failure summary gives each failed rank's exit code: a code of its own (1) is the
  process ending on an exception; a signal (`-15 (SIGTERM)`) is torchrun stopping the rest once one
  rank failed (`SIGABRT` is the watchdog's own abort on a timeout: a rank that gave up waiting);
- the rank's own traceback (`[rank1]: Traceback ...` then `ValueError: ...`), or the one torchrun's
  summary holds where the rank ran under torch's `@record`, names the exception and where it was
  raised;
- a rank that failed in a collective says so first (a watchdog timeout, gloo's timeout, a peer's
  closed socket, DETAIL's checks, NCCL's remote error): such a rank gave up waiting, and is not one
  that failed by itself.
Without torchrun's summary an uncaught traceback that is no collective's failure still says the rank
failed by itself (its exit code is then not in the log). The readers are `evidence.hang.job_log`;
the hang readings (`rules_hang`, `rules_hang_log`) name the exit where they would otherwise call the
rank silent or outside the collectives, and the not-explained rule leaves its exception line to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.hang.job_log import JobLog, TorchrunFailure
from ncclprobe.findings import Finding
from ncclprobe.numbers import ascii_re
from ncclprobe.rank_ranges import rank_word

# an exception that is a collective's or the process group's failure: the rank gave up waiting
_COLLECTIVE = ascii_re(
    r"(?i)Dist(?:Backend|Network|Store)Error|Watchdog|timed out|timeout|mismatch between collectives"
    r"|monitoredBarrier|Connection (?:closed|reset)|NCCL error|ncclRemoteError|gloo|EnforceNotMet"
)
_LAUNCHER_STOPS = ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP")  # what torchrun sends the rest


@dataclass(frozen=True)
class RankExit:
    """A rank that failed by itself, as the log shows it."""

    rank: int
    exitcode: int | None  # torchrun's; None where its summary is not in the log
    exception: str | None  # the last line of the rank's traceback
    raised_at: str | None  # its innermost frame: "train.py:406 in step"
    root_cause: bool  # torchrun's first observed failure

    @property
    def said(self) -> str:
        """`rank 1 exited with code 1 after ValueError: bad batch`."""
        how = f"exited with code {self.exitcode}" if self.exitcode is not None else "failed"
        return f"rank {self.rank} {how}" + (f" after {self.exception}" if self.exception else "")


def own_exits(ev: E.Evidence) -> dict[int, RankExit]:
    """rank -> how it failed by itself, over every log given (a rank's own stderr beside
    torchrun's console: the summary in one, the traceback in the other)."""
    logs = ev.job_logs
    waited = _gave_up_waiting(logs)
    summary = {f.rank: f for log in logs for f in log.failures if f.rank is not None}
    errors = {r: e for log in logs for r, e in log.errors.items()}
    where = {r: w for log in logs for r, w in log.raised_at.items()}
    out = {}
    for rank in sorted(set(summary) | set(where)):  # an exit code, or a traceback of its own
        failure = summary.get(rank)
        error = errors.get(rank) or (failure.exception if failure else None)
        if rank in waited or (error is not None and _COLLECTIVE.search(error)):
            continue
        if failure is not None and (failure.signal or (failure.exitcode or 0) <= 0):
            continue  # stopped by a signal, or no failure of its own
        out[rank] = RankExit(
            rank,
            failure.exitcode if failure else None,
            error,
            where.get(rank) or (failure.raised_at if failure else None),
            bool(failure and failure.root_cause),
        )
    return out


def _gave_up_waiting(logs: list[JobLog]) -> set[int]:
    """Ranks whose log shows a collective that failed on them (they waited, then gave up)."""
    out: set[int] = set()
    for log in logs:
        out |= {t.rank for t in log.timeouts if t.rank is not None}
        out |= {s.rank for s in log.statuses if s.rank is not None}
        out |= set(log.gloo_timeouts) | log.peer_closed | log.ops_failed | log.remote_errors
        out |= set(log.gloo_size_mismatch) | log.dump_signals
    return out


def others(ev: E.Evidence, exclude: Iterable[int]) -> str:
    """What torchrun says of the other failed ranks: `rank 0 was stopped by torchrun (SIGTERM)`."""
    skip = set(exclude)
    rest = [
        f for log in ev.job_logs for f in log.failures if f.rank is not None and f.rank not in skip
    ]
    by_how: dict[str, list[int]] = {}
    for f in rest:
        by_how.setdefault(_how(f), []).append(f.rank)
    return "; ".join(
        f"{rank_word(ranks)} {'was' if len(set(ranks)) == 1 else 'were'} {how}"
        for how, ranks in by_how.items()
    )


def _how(f: TorchrunFailure) -> str:
    if f.signal in _LAUNCHER_STOPS:
        return f"stopped by torchrun ({f.signal})"
    if f.signal:
        return f"ended by {f.signal}" + (" (the watchdog's abort)" if f.signal == "SIGABRT" else "")
    return f"exited with code {f.exitcode}"


def exit_findings(ev: E.Evidence) -> list[Finding]:
    """One error per rank that failed by itself: the cause of what the others then did."""
    exits = own_exits(ev)
    if not exits:
        return []
    rest = others(ev, exits)
    out = []
    for x in exits.values():
        said = x.said + (f" (raised at {x.raised_at})" if x.raised_at else "")
        summary = x.exitcode is not None
        out.append(
            Finding(
                rule="hang-rank-exited",
                severity="error",
                confidence="high" if summary else "medium",
                title=said + (f"; {rest}" if rest else ""),
                detail=(
                    (
                        f"torchrun's summary gives rank {x.rank} exit code {x.exitcode}, its own, not "
                        "a signal" + (" (its first observed failure)" if x.root_cause else "")
                        if summary
                        else f"Rank {x.rank}'s log ends in an uncaught traceback (torchrun's summary, "
                        "with its exit code, is not in the log)"
                    )
                    + f", and rank {x.rank}'s traceback ends in `{x.exception or '?'}`"
                    + (f", raised at {x.raised_at}" if x.raised_at else "")
                    + f". Rank {x.rank} logged no collective failure of its own: it failed by "
                    "itself, in its own code, and every collective the others then issued waited "
                    "for it"
                    + (f"; {rest}" if rest else "")
                    + ". Fix that exception: the others' failures are its aftermath."
                ),
                evidence={
                    "because": "exited",
                    "rank": x.rank,
                    "exitcode": x.exitcode,
                    "exception": x.exception,
                    "raised_at": x.raised_at,
                    "root_cause": x.root_cause,
                },
            )
        )
    return out
