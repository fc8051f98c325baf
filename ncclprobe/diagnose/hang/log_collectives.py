"""A job's log read as collectives: every (group, seq) some rank's watchdog timed out in, with each
rank's own call, status and silence (`LogStuck`), and the words that name their calls and ranks.

It lives below the log-only hang rules (`rules_hang_log`, `rules_log_watchdog`) that word these
collectives: gathering the ranks' timeouts into one collective per sequence number is a reading of
its own, shared by the findings and the notes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ncclprobe.evidence import bundle as E
from ncclprobe.evidence.hang.job_log_records import WatchdogTimeout
from ncclprobe.rank_ranges import rank_word


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


def stuck_collectives(ev: E.Evidence) -> list[LogStuck]:
    """Every (group, seq) a watchdog timed out in, with each rank's call, status and silence."""
    known = _known_ranks(ev)
    out = []
    for (group, seq), ranks in sorted(by_collective(ev).items(), key=lambda kv: kv[0][1] or 0):
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


def by_collective(ev: E.Evidence) -> dict[tuple, dict]:
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
    if len({call(t) for t in (*unnamed.values(), *there.values())}) == 1:
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


def call(t: WatchdogTimeout) -> str:
    out = f"{t.op} of {numel(t.numel_in)} elements"
    return out if t.numel_out in (None, t.numel_in) else f"{out} in, {numel(t.numel_out)} out"


def numel(n: int | None) -> str:
    return f"{n:,}" if n is not None else "?"


def ranks(ranks: Iterable[int | None]) -> str:
    """`rank 3`, `ranks 0-84, 86-1023 (1023 ranks)`: ranges, so 1,024 ranks stay one line."""
    return rank_word(r for r in ranks if r is not None)


def done(n: int | None) -> str:
    """A last completed work: `#12`, or none where PyTorch printed -1 or an impossible value."""
    return f"#{n}" if n is not None and n > 0 else "none"
