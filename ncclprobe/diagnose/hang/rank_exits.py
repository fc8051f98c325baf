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
failed by itself (its exit code is then not in the log), but only where it is the last thing the rank
wrote: a traceback followed by more of the rank's own lines was caught and logged, and the rank went
on (it is shown as a failure line nobody explains, not as the rank's end).
A signal torchrun does not send to stop the rest (SIGKILL as the first observed failure, SIGABRT,
SIGSEGV, SIGBUS, SIGFPE, SIGILL) is the rank's own end where no timeout line explains it: SIGKILL is
most often the kernel's OOM killer, SIGSEGV and its kin a native crash; SIGABRT is the watchdog's
abort only where the log holds a watchdog or timeout line. torchrun's `<attempt>/N/stderr.log` is
named by the LOCAL rank: a rank read from that name alone is said as `local rank N`.
The readers are `evidence.hang.job_log`;
the hang readings (`rules_hang`, `rules_log_watchdog`) name the exit where they would otherwise call the
rank silent or outside the collectives, and the not-explained rule leaves its exception line to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.hang.job_log_records import JobLog, TorchrunFailure
from ncclprobe.findings import Finding
from ncclprobe.numbers import ascii_re
from ncclprobe.rank_ranges import rank_word

# an exception that is a collective's or the process group's failure: the rank gave up waiting
_COLLECTIVE = ascii_re(
    r"(?i)Dist(?:Backend|Network|Store)Error|Watchdog|timed out|timeout|mismatch between collectives"
    r"|monitoredBarrier|Connection (?:closed|reset)|NCCL error|ncclRemoteError|gloo|EnforceNotMet"
)
_LAUNCHER_STOPS = ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP")  # what torchrun sends the rest
# signals that end a process on their own: a crash, an abort, or the kernel's kill (SIGKILL, sent
# by torchrun too, but only after its SIGTERM: a first observed failure by SIGKILL is not its stop)
FATAL_SIGNALS = ("SIGKILL", "SIGABRT", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")
_NATIVE = {
    "SIGSEGV": "an invalid memory access",
    "SIGBUS": "a bad memory access (a bus error: often a truncated memory-mapped file or a full /dev/shm)",
    "SIGFPE": "an arithmetic fault (an integer division by zero)",
    "SIGILL": "an illegal instruction (code built for another CPU)",
}


@dataclass(frozen=True)
class RankExit:
    """A rank that failed by itself, as the log shows it."""

    rank: int
    exitcode: int | None  # torchrun's; None where its summary is not in the log
    exception: str | None  # the last line of the rank's traceback
    raised_at: str | None  # its innermost frame: "train.py:406 in step"
    root_cause: bool  # torchrun's first observed failure
    signal: str | None = None  # the signal that ended it (torchrun's summary), where one did
    local_of: str | None = None  # the torchrun file whose folder gives it, where `rank` is local

    @property
    def who(self) -> str:
        """`rank 1`, or `local rank 1 (.../attempt_0/1/stderr.log)` where only the file names it."""
        return f"local rank {self.rank} ({self.local_of})" if self.local_of else f"rank {self.rank}"

    @property
    def said(self) -> str:
        """`rank 1 exited with code 1 after ValueError: bad batch`; `rank 1 was ended by SIGKILL`."""
        if self.signal:
            how = f"was ended by {self.signal}"
        elif self.exitcode is not None:
            how = f"exited with code {self.exitcode}"
        else:
            how = "failed"
        return f"{self.who} {how}" + (f" after {self.exception}" if self.exception else "")


def own_exits(ev: E.Evidence) -> dict[int, RankExit]:
    """rank -> how it failed by itself (global ranks only: a local rank is no key of the dumps')."""
    return {x.rank: x for x in all_exits(ev) if x.local_of is None}


def all_exits(ev: E.Evidence) -> list[RankExit]:
    """Every rank that failed by itself, over every log given (a rank's own stderr beside
    torchrun's console: the summary in one, the traceback in the other)."""
    logs = ev.job_logs
    waited = _gave_up_waiting(logs)
    watchdog = any(log.timeouts or log.statuses or log.ops_failed for log in logs)
    summary = {f.rank: f for log in logs for f in log.failures if f.rank is not None}
    errors = {r: e for log in logs for r, e in log.errors.items()}
    where = {r: w for log in logs for r, w in log.raised_at.items()}
    went_on = {r for log in logs for r in log.went_on}
    local = {log.local_file_rank: log.path for log in logs if log.local_file_rank is not None}
    out = []
    for rank in sorted(set(summary) | set(where)):  # an exit code, or a traceback of its own
        failure = summary.get(rank)
        if failure is None and rank in went_on:
            continue  # its traceback was caught and logged: the rank went on
        backed = failure is not None and failure.signal is None  # an exit code backs it
        own = errors.get(rank) if rank not in went_on or backed else None
        error = own or (failure.exception if failure else None)
        if rank in waited or (error is not None and _COLLECTIVE.search(error)):
            continue
        if failure is not None and not _its_own_end(failure, watchdog):
            continue  # stopped by torchrun, the watchdog's abort, or no failure of its own
        out.append(
            RankExit(
                rank,
                failure.exitcode if failure else None,
                error,
                (where.get(rank) if own else None) or (failure.raised_at if failure else None),
                bool(failure and failure.root_cause),
                failure.signal if failure else None,
                local.get(rank) if failure is None else None,
            )
        )
    return out


def _its_own_end(f: TorchrunFailure, watchdog: bool) -> bool:
    """An exit code of its own, or a signal torchrun did not send to stop it: a crash, an abort
    no watchdog line explains, or a SIGKILL that came first (torchrun's follows its SIGTERM)."""
    if f.signal is None:
        return (f.exitcode or 0) > 0
    if f.signal not in FATAL_SIGNALS:
        return False
    if f.signal == "SIGKILL":
        return f.root_cause
    return not (f.signal == "SIGABRT" and watchdog)


def _gave_up_waiting(logs: list[JobLog]) -> set[int]:
    """Ranks whose log shows a collective that failed on them (they waited, then gave up)."""
    out: set[int] = set()
    for log in logs:
        out |= {t.rank for t in log.timeouts if t.rank is not None}
        out |= {s.rank for s in log.statuses if s.rank is not None}
        out |= set(log.gloo_timeouts) | log.peer_closed | log.ops_failed | log.remote_errors
        out |= set(log.gloo_size_mismatch) | log.dump_signals
    return out


def timed_out(ev: E.Evidence) -> bool:
    """A line of the logs says a collective timed out or failed on a rank (it gave up waiting)."""
    return any(
        log.timeouts
        or log.statuses
        or log.gloo_timeouts
        or log.ops_failed
        or log.peer_closed
        or log.remote_errors
        or log.barrier_missing
        or log.gloo_size_mismatch
        or log.fingerprints
        for log in ev.job_logs
    )


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
    exits = all_exits(ev)
    if not exits:
        return _failed_unexplained(ev)
    rest = others(ev, [x.rank for x in exits if x.local_of is None])
    out = []
    for x in exits:
        said = x.said + (f" (raised at {x.raised_at})" if x.raised_at else "")
        summary = x.exitcode is not None
        out.append(
            Finding(
                rule="hang-rank-exited",
                severity="error",
                confidence="high" if summary else "medium",
                title=said + (f"; {rest}" if rest else ""),
                detail=_detail(x, rest),
                evidence={
                    "because": "signal" if x.signal else "exited",
                    "rank": x.rank,
                    "local_rank_file": x.local_of,
                    "exitcode": x.exitcode,
                    "signal": x.signal,
                    "exception": x.exception,
                    "raised_at": x.raised_at,
                    "root_cause": x.root_cause,
                },
            )
        )
    return out


def _detail(x: RankExit, rest: str) -> str:
    """What the log shows of the rank's end, and what it cannot show, one branch per kind of end."""
    then = f"; {rest}" if rest else ""
    first = " (its first observed failure)" if x.root_cause else ""
    if x.signal:
        return (
            _signal_detail(x, first)
            + f" Every collective the others then issued waited for it{then}."
        )
    if x.exitcode is not None:
        head = f"torchrun's summary gives rank {x.rank} exit code {x.exitcode}, its own, not a signal{first}"
    else:
        head = (
            f"{x.who[:1].upper()}{x.who[1:]}'s log ends in an uncaught traceback (torchrun's summary, "
            "with its exit code, is not in the log)"
        )
    if x.exception is None:
        return (
            f"{head}; its log holds no traceback (run with torch's @record, or read its own stderr). "
            f"Rank {x.rank} logged no collective failure of its own, and every collective the others "
            f"then issued waited for it{then}."
        )
    return (
        f"{head}, and its traceback ends in `{x.exception}`"
        + (f", raised at {x.raised_at}" if x.raised_at else "")
        + f". It logged no collective failure of its own: it failed by itself, in its own code, and "
        f"every collective the others then issued waited for it{then}. Fix that exception: the others' "
        "failures are its aftermath."
    )


def _signal_detail(x: RankExit, first: str) -> str:
    head = (
        f"torchrun's summary gives rank {x.rank} exit code {x.exitcode}: it was ended by {x.signal}"
        f"{first}, a signal torchrun did not send to stop it (it stops the others with SIGTERM), and "
        "the log holds no watchdog or timeout line that would make it a rank that gave up waiting."
    )
    if x.signal == "SIGKILL":
        return (
            head + " SIGKILL cannot be caught, so the rank could write nothing of its end. The "
            "kernel's OOM killer is its usual sender, which this log cannot show: look for "
            "`Out of memory: Killed process` in `dmesg -T` on its host, or in the scheduler's memory "
            "accounting (`sacct --format=JobID,MaxRSS,State`) for the job."
        )
    if x.signal == "SIGABRT":
        return (
            head + " The process aborted itself (C++'s terminate after an uncaught exception, a "
            "failed assertion, or NCCL's watchdog taking the process down; with no watchdog line "
            "in the log, the last is not the reading here): the lines rank "
            f"{x.rank} wrote just before it say which."
        )
    return (
        head
        + f" {x.signal} is a native crash: {_NATIVE.get(x.signal or '', 'a fault')} in the process "
        "(a C/C++/CUDA extension, a library or the interpreter), not a Python exception. "
        "PYTHONFAULTHANDLER=1 in the rank's environment makes Python print every thread's stack "
        "when it happens."
    )


def _failed_unexplained(ev: E.Evidence) -> list[Finding]:
    """torchrun's summary says the job failed, and no line says why: never `no findings`."""
    failures = [f for log in ev.job_logs for f in log.failures]
    if not failures or timed_out(ev) or any(d.entries for d in ev.flight_recorder):
        return []  # no failure, a timeout line or dumps: the hang readings explain it
    first = next((f for f in failures if f.root_cause), failures[0])
    how = f"ended by {first.signal}" if first.signal else f"exit code {first.exitcode}"
    outside = first.signal in _LAUNCHER_STOPS
    return [
        Finding(
            rule="hang-job-failed",
            severity="warning",
            confidence="high",
            title=f"torchrun says the job failed: its first observed failure is rank {first.rank}, "
            f"{how}; the log does not say why",
            detail=(
                f"torchrun's summary lists {len(failures)} failed rank(s), first rank {first.rank} "
                f"({how}); the log holds no traceback, exit code of a rank's own or timeout line "
                "that says why. "
                + (
                    f"A {first.signal} that comes first is a stop from outside torchrun (a "
                    "scheduler's time limit or preemption, a user's Ctrl-C, a health check): the "
                    "scheduler's record of the job says which."
                    if outside
                    else f"Rank {first.rank}'s own stderr may say more."
                )
            ),
            evidence={
                "because": "job-failed",
                "rank": first.rank,
                "exitcode": first.exitcode,
                "signal": first.signal,
                "failed_ranks": len(failures),
            },
        )
    ]
