"""Running the user's command under the capture: its output passed through and logged, its signals
as they would have been, and its end.

The job runs in the capture's own process group, so a terminal's Ctrl-C (SIGINT, SIGQUIT; SIGHUP on
hang-up) reaches the job and every process of it directly, exactly as without the capture. The
capture tells that signal from one sent to the capture alone (`kill PID`) by the signal's origin:
the kernel's (`si_code` SI_KERNEL, the terminal's) was delivered to the job too and is not sent
again; a process's (SI_USER, SI_QUEUE) was meant for the command, and is forwarded to it. That needs
the signal's origin, which a Python signal handler never sees: the capture blocks the signals in its
own threads once the job has started (the job is exec'd with the mask it had) and takes them with
`sigtimedwait`. A signal sent to the capture's whole group (a scheduler's killpg) reaches the job
and is forwarded once more: SIGTERM twice, which torchrun and Python handle as once.

SIGUSR1 to the capture asks every process for its dumps now; SIGUSR2 starts or stops the in-job
profiler (`--profile control`).

The job's stdout and stderr go to the capture's own files as they come (bytes untouched) and, line by line
with secrets masked, into `job.log` in the order they arrived.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.secrets import mask_text

SI_KERNEL = 0x80  # siginfo's si_code of a signal the kernel sent (a terminal's Ctrl-C)
TAKEN = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
TERMINAL = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
TICK_S = 0.25
GIVE_UP_AFTER = 3  # the third Ctrl-C: stop waiting for the job, end what is left of it
DRAIN_S = 2.0  # how long the output of a finished job may still arrive


@dataclass
class Output:
    """The job's output: passed through, logged masked, counted (progress)."""

    log: Path
    bytes_seen: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list = field(default_factory=list)

    def __post_init__(self):
        self.handle = open(self.log, "w", encoding="utf-8", errors="replace")

    def follow(self, pipe, sink) -> None:
        thread = threading.Thread(target=self._pump, args=(pipe, sink), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _pump(self, pipe, sink) -> None:
        pending = b""
        fd = pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            _write(sink, chunk)
            pending += chunk
            lines = pending.split(b"\n")
            pending = lines.pop()
            self._log(lines)
        if pending:
            self._log([pending])

    def _log(self, lines: list[bytes]) -> None:
        with self.lock:
            for raw in lines:
                self.bytes_seen += len(raw) + 1
                text = raw.decode("utf-8", "replace").rstrip("\r")
                self.handle.write(mask_text(text) + "\n")
            self.handle.flush()

    def close(self) -> None:
        for thread in self.threads:
            thread.join(DRAIN_S)
        with self.lock:
            self.handle.close()


def _write(sink, chunk: bytes) -> None:
    """The job's bytes to the capture's own stream's file, untouched: the job's output reaches the
    terminal as it would without the capture (ncclprobe's terminal guard, `visible`, keeps what
    ncclprobe itself prints from driving the terminal; this is the job talking to its own)."""
    try:
        sink.flush()
        fd = sink.fileno()
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]
    except (OSError, ValueError):
        pass  # the capture's own terminal went away: the log still gets it


@dataclass
class Ending:
    """How the job ended and what the capture did."""

    ended_by: str = "exit"  # exit | hang | interrupt | terminated | server-done
    returncode: int | None = None
    signals: list[str] = field(default_factory=list)  # what reached the capture, and what it did
    killed: list[int] = field(default_factory=list)

    @property
    def exit_code(self) -> int | None:
        """The job's exit code as a shell reports it (a signal N as 128 + N)."""
        if self.returncode is None:
            return None
        return 128 - self.returncode if self.returncode < 0 else self.returncode


class Job:
    """The user's command, started with `env`; `tick()` is called every TICK_S while it runs and
    may return a reason to end it ("hang", "server-done")."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, stdout_to_stderr=False):
        """`stdout_to_stderr`: the job's stdout goes to the capture's stderr (and the log), so that
        the capture's own stdout carries only its report (JSON or CSV that a pipe reads)."""
        self.argv, self.env, self.output = argv, env, Output(log)
        self.stdout_sink = sys.stderr if stdout_to_stderr else sys.stdout
        self.process: subprocess.Popen | None = None
        self.ending = Ending()
        self.interrupts = 0
        self._early: list[int] = []

    @property
    def started(self) -> subprocess.Popen:
        """The job's process, once `start` ran (every later call needs it)."""
        if self.process is None:
            raise RuntimeError("the job has not started")
        return self.process

    def start(self) -> int:
        previous = {sig: signal.signal(sig, self._early_signal) for sig in TAKEN}
        try:
            self.process = subprocess.Popen(
                self.argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            raise
        signal.pthread_sigmask(signal.SIG_BLOCK, TAKEN)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        self.output.follow(self.started.stdout, self.stdout_sink)
        self.output.follow(self.started.stderr, sys.stderr)
        return self.started.pid

    def _early_signal(self, signum, _frame) -> None:
        self._early.append(signum)  # before the mask is up: handled by the loop like the others

    def run(
        self,
        tick: Callable[[], str | None],
        on_dump: Callable[[str], None],
        on_profile: Callable[[], None],
        alive: Callable[[], list[int]] = list,
    ) -> Ending:
        """Wait for the job's end: its exit, a reason from `tick` (the job still runs then: the
        caller ends it), or the third Ctrl-C (the tree is ended here). The signals stay blocked
        until `release`: the capture's own ending is not cut by one."""
        for signum in self._early:
            self._signal(signum, SI_KERNEL if signum in TERMINAL else 0, on_dump, on_profile)
        while self.started.poll() is None:
            info = signal.sigtimedwait(TAKEN, TICK_S)
            if info is not None:
                self._signal(info.si_signo, info.si_code, on_dump, on_profile)
                if self.interrupts >= GIVE_UP_AFTER:
                    self.end("the third Ctrl-C", alive)
                    break
                continue
            reason = tick()
            if reason:
                self.ending.ended_by = reason
                return self.ending
        self.ending.returncode = self.started.returncode
        return self.ending

    def release(self) -> None:
        """Take what is pending (the job had those too, or its end made them moot) and unblock."""
        while signal.sigtimedwait(TAKEN, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, TAKEN)

    def _signal(self, signum: int, code: int, on_dump, on_profile) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGUSR1:
            self.ending.signals.append(f"{name}: dumps asked for")
            on_dump("signal")
            return
        if signum == signal.SIGUSR2:
            self.ending.signals.append(f"{name}: profiler switched")
            on_profile()
            return
        if signum in TERMINAL:
            self.interrupts += 1
            self.ending.ended_by = "interrupt"
            on_dump("interrupt")
        elif signum == signal.SIGTERM:
            self.ending.ended_by = "terminated"
        if code == SI_KERNEL:
            self.ending.signals.append(f"{name} from the terminal: the job got it too")
            return
        self.ending.signals.append(
            f"{name} sent to the capture: forwarded to pid {self.started.pid}"
        )
        _kill(self.started.pid, signum)

    def end(
        self,
        why: str,
        alive: Callable[[], list[int]] = list,
        grace_s: float = 10.0,
        signum: int = signal.SIGTERM,
    ) -> None:
        """End the job as the capture decided (`why`): `signum` to the command (a launcher passes it
        on to its workers), then SIGKILL to whatever of the tree is still there after `grace_s`."""
        if self.started.poll() is None:
            name = signal.Signals(signum).name
            self.ending.signals.append(f"{name} to pid {self.started.pid} ({why})")
            _kill(self.started.pid, signum)
        deadline = time.monotonic() + grace_s
        while self.started.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in alive() if pid != os.getpid()]
        if self.started.poll() is None:
            left.append(self.started.pid)
        for pid in left:
            if _kill(pid, signal.SIGKILL):
                self.ending.killed.append(pid)
        self.started.wait()
        self.ending.returncode = self.started.returncode

    def finish(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.wait()
        if self.process is not None and self.ending.returncode is None:
            self.ending.returncode = self.process.returncode
        self.output.close()


def _kill(pid: int, signum: int) -> bool:
    try:
        os.kill(pid, signum)
        return True
    except OSError:
        return False
