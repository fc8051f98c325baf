"""When a worker pool is making progress, and which ranks stopped making it.

The launcher kills a pool that makes no progress for `timeout_s`. Progress is a message from any
rank; before a rank's first message (it reports `rendezvous` once its imports are done, just before
it waits for its peers) it is also CPU time that rank spends: importing torch on a busy machine is
slow, not hung, and a start that is stuck or stopped (SIGSTOP) spends none.

Only the CPU time of ranks that have not reported counts. A rank waiting for its peers at the
rendezvous still spends a little (its store's threads poll: 5 to 7 ms a second measured here), and
when that counted, a peer stopped during the start hung the pool forever under any timeout over a
few seconds: the waiting rank crossed the noise bar every few seconds.

When the pool is killed, the ranks that held it up are named from facts: those that never reached
the rendezvous, else those stopped by a signal (SIGSTOP, a debugger). Mid-run, CPU time cannot tell
the culprit: a rank blocked in a gloo barrier spent less than its sleeping peer, whose threads poll
(tried on the launcher test's hang, it blamed the waiting rank), so no rank is named there unless
one is stopped.
"""

from __future__ import annotations

import subprocess

import psutil

CPU_NOISE_S = 0.02  # CPU time a starting rank must add to count as progress (clock ticks are 10 ms)


class Progress:
    """Every rank's progress, sampled by the launcher's watch loop."""

    def __init__(self, procs: dict[int, subprocess.Popen], now: float):
        self.procs = procs
        self.last = now  # the pool's last progress
        self.reported: set[int] = set()
        self.cpu_mark = {rank: 0.0 for rank in procs}  # a starting rank's CPU at its last progress

    def sample(self, senders: set[int], now: float) -> None:
        """Take in who sent messages since the last sample, and the starting ranks' CPU times."""
        self.reported |= senders
        moved = []
        for rank in (r for r in self.procs if r not in self.reported):
            cpu = cpu_seconds(self.procs[rank].pid)
            if cpu > self.cpu_mark[rank] + CPU_NOISE_S:
                self.cpu_mark[rank] = cpu
                moved.append(rank)
        if senders or moved:
            self.last = now

    def silent_for(self, now: float) -> float:
        return now - self.last

    def stalled(self) -> list[int]:
        """The ranks that held the pool up (see the module's docstring); empty when it cannot tell."""
        alive = [rank for rank, proc in self.procs.items() if proc.poll() is None]
        starting = [rank for rank in alive if rank not in self.reported]
        return starting or [rank for rank in alive if self._stopped(rank)]

    def hang_reason(self, timeout_s: float) -> str:
        """One line: how long the pool stood still, and which ranks held it up."""
        stalled = self.stalled()
        if not self.reported:
            return f"no progress before any rank started for {timeout_s:g} s; pool killed"
        if not stalled:
            return f"no progress from any rank for {timeout_s:g} s; pool killed"
        names = ", ".join(f"rank {rank}{self._notes(rank)}" for rank in stalled)
        others = " while the others waited" if len(stalled) < len(self.procs) else ""
        return f"no progress for {timeout_s:g} s from {names}{others}; pool killed"

    def _notes(self, rank: int) -> str:
        notes = ["stopped by a signal"] if self._stopped(rank) else []
        notes += [] if rank in self.reported else ["never reached the rendezvous"]
        return f" ({'; '.join(notes)})" if notes else ""

    def _stopped(self, rank: int) -> bool:
        try:
            return psutil.Process(self.procs[rank].pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            return False


def cpu_seconds(pid: int) -> float:
    """CPU time a process has spent so far (user + system), 0 when it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system
