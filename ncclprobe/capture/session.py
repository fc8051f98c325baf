"""`ncclprobe capture -- CMD` as one library call: run the user's command with the evidence switched
on, watch it, end it cleanly, record what was collected, then diagnose it.

The directory is built as every ncclprobe output is (`safe_output.atomic_directory`): the job writes
into a temporary directory beside the destination (`.NAME.*.tmp`), which becomes the directory only
once the job has ended and the record is written; a capture killed outright leaves only that
temporary directory, never a half-written capture under the real name. The diagnosis then reads
the finished directory, the same road as `ncclprobe diagnose --capture DIR`, and is written into
it as well as printed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from signal import SIGINT
from typing import Any

from ncclprobe.capture import hook
from ncclprobe.capture.environment import (
    JobEnvironment,
    fr_respell,
    job_environment,
    job_torch,
)
from ncclprobe.capture.job import Ending, Job
from ncclprobe.capture.record import write_manifest, write_processes
from ncclprobe.capture.tree import TreeWatch, observed
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.live import capture_dir as D
from ncclprobe.safe_output import atomic_directory, check_output_dir

DUMP_WAIT_S = 15.0  # how long the ranks may take to dump once asked (a hang, Ctrl-C)
TERM_GRACE_S = 10.0  # after SIGTERM, how long before what is left of the job is killed
PEER_GRACE_S = 3.0  # a failing rank waits this long for its peers' dumps before it fails


@dataclass(frozen=True)
class Profile:
    """What the in-job module profiles: `off`, `control` (SIGUSR2 starts and stops it; a server's
    load does it itself), or the steps `start`..`stop` (top-level forwards, counted from 1)."""

    mode: str = "steps"
    start: int = 3
    stop: int = 6

    def to_json(self) -> dict:
        if self.mode == "steps":
            return {"mode": "steps", "start": self.start, "stop": self.stop}
        return {"mode": self.mode}


@dataclass(frozen=True)
class CaptureRequest:
    command: tuple[str, ...]
    output: Path | None = None
    force: bool = False
    hang_after_s: float | None = 300.0  # None: never ended for a hang
    profile: Profile = Profile()
    tuning: bool = False  # NCCL's per-call TUNING lines too
    server: Any = None  # capture.server.ServerRequest, or None
    dump_wait_s: float = DUMP_WAIT_S
    job_stdout_to_stderr: bool = False  # the report is JSON or CSV: stdout is the report's alone
    term_grace_s: float = TERM_GRACE_S


@dataclass
class Captured:
    """What the run left: the directory, how the job ended, and the exit code the job gave."""

    directory: Path
    ending: Ending
    notes: list[str] = field(default_factory=list)

    @property
    def job_failed(self) -> bool:
        """The job failed or was ended for a hang or by Ctrl-C: its own exit code is the capture's."""
        code = self.ending.exit_code
        return self.ending.ended_by in ("hang", "terminated") or (
            code not in (None, 0) and self.ending.ended_by != "server-done"
        )


def default_output(now: float | None = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path, n = Path(f"capture-{stamp}"), 2
    while path.exists():
        path, n = Path(f"capture-{stamp}-{n}"), n + 1
    return path


def check(request: CaptureRequest) -> Path:
    """The destination, checked before anything runs."""
    if not request.command:
        raise UsageProblem("give the command to capture after `--`: ncclprobe capture -- CMD ...")
    output = request.output or default_output()
    check_output_dir(output, force=request.force, what="capture directory")
    return output


def capture(request: CaptureRequest, started: Callable[[Path], None] = lambda _p: None) -> Captured:
    """Run the job with the evidence on; returns once the directory is in place."""
    output = check(request)
    started(output)
    with atomic_directory(output, force=request.force, what="capture directory") as temp:
        ending, notes = _run(request, temp, output.resolve())
    return Captured(output, ending, notes)


def _run(request: CaptureRequest, directory: Path, final: Path) -> tuple[Ending, list[str]]:
    profile = _profile(request)
    torch_version = job_torch(request.command, os.environ)
    hook_dir = hook.write_hook(
        directory, profile, PEER_GRACE_S, None if torch_version else fr_respell()
    )
    env = job_environment(
        os.environ, directory, hook_dir, tuning=request.tuning, torch_version=torch_version
    )
    job = Job(list(request.command), env.env, directory / D.JOB_LOG, request.job_stdout_to_stderr)
    try:
        pid = job.start()
    except OSError as exc:
        raise UsageProblem(f"cannot run {request.command[0]!r}: {exc.strerror or exc}") from None
    watch = TreeWatch(pid)
    control = _Control(directory)
    server = request.server.driver(directory, control, request.command) if request.server else None
    try:
        ending = job.run(
            _ticker(request, directory, job, watch, server),
            control.dump,
            control.toggle_profile,
            watch.alive,
        )
        if ending.ended_by == "hang":
            control.dump("hang")
            _wait_for_dumps(directory, watch, control.asked_at, request.dump_wait_s)
            job.end(
                f"no progress for {request.hang_after_s:g} s", watch.alive, request.term_grace_s
            )
        elif ending.ended_by == "server-done":  # as a Ctrl-C would: the server shuts down cleanly
            job.end("the load and the profile are done", watch.alive, request.term_grace_s, SIGINT)
        elif ending.ended_by == "interrupt" and control.asked_at is not None:
            _wait_for_dumps(directory, watch, control.asked_at, 2.0)
        job.finish()
    finally:
        job.release()
        job.finish()
    watch.poll()
    notes = _finish(directory, final, request, env, job, watch, server)
    return job.ending, notes


def _profile(request: CaptureRequest) -> dict:
    """The in-job profiler's orders: a server is profiled around the capture's load, not by steps."""
    if request.server is not None and request.profile.mode == "steps":
        return {"mode": "control"}
    return request.profile.to_json()


class _Control:
    """The capture's requests to the in-job module (`hook.request`), numbered."""

    def __init__(self, directory: Path):
        self.directory, self.generation = directory, 0
        self.asked_at: float | None = None
        self.profiling = False

    def dump(self, why: str) -> None:
        self.generation += 1
        self.asked_at = time.time()
        hook.request(self.directory, "dump", self.generation, why)

    def toggle_profile(self) -> None:
        self.profile(not self.profiling)

    def profile(self, on: bool) -> None:
        self.generation += 1
        self.profiling = on
        hook.request(self.directory, "profile", self.generation, "start" if on else "stop")


def _ticker(request: CaptureRequest, directory: Path, job: Job, watch: TreeWatch, server):
    state = {"progress": -1, "since": time.monotonic()}

    def tick() -> str | None:
        watch.poll()
        now = time.monotonic()
        # output, steps, processes appearing and the in-job module's own events (a process group
        # created, the step hooks in): a job starting up is not hung
        progress = hook.progress(directory) + job.output.bytes_seen + len(watch.seen)
        progress += hook.events(directory)
        progress += server.progress() if server is not None else 0
        if progress != state["progress"]:
            state["progress"], state["since"] = progress, now
        if server is not None:
            reason = server.tick()
            if reason:
                return reason
            if server.busy():
                state["since"] = now  # a server waiting for requests is idle, not hung
        if request.hang_after_s is not None and now - state["since"] >= request.hang_after_s:
            return "hang"
        return None

    return tick


def _wait_for_dumps(
    directory: Path, watch: TreeWatch, asked_at: float | None, wait_s: float
) -> None:
    """Until every live process the in-job module runs in has dumped since `asked_at`, or `wait_s`."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        watch.poll()
        records = hook.injob_records(directory)
        waiting = [
            pid
            for pid in watch.alive()
            if pid in records and not _dumped_since(records[pid], asked_at or 0.0)
        ]
        if not waiting:
            return
        time.sleep(0.2)


def _dumped_since(record: dict, when: float) -> bool:
    for event in record.get("events") or ():
        stamp, _, text = str(event).partition(" ")
        try:
            if text.startswith("dumped") and float(stamp) >= when - 0.5:
                return True
        except ValueError:
            continue
    return False


def _finish(
    directory: Path, final: Path, request, env: JobEnvironment, job: Job, watch: TreeWatch, server
) -> list[str]:
    from ncclprobe.evidence.live.logcheck import read_logs

    records = hook.injob_records(directory)
    nccl_read: dict[int, dict] = {}
    for path in sorted((directory / D.NCCL_LOGS).glob("*.log")):
        try:
            for item in read_logs([path]):
                if item.on_this_host():
                    nccl_read.setdefault(item.pid, {}).update(item.env)
        except UsageProblem:
            continue  # an empty log (NCCL opened the file, then the process ended)
    rows = observed(watch, env.settings, env.added, records, nccl_read)
    rows = _relocated(rows, directory, final)
    write_processes(directory, watch.root, rows)
    notes = _notes(rows, job.ending)
    profile = _profile(request)
    write_manifest(
        directory,
        list(request.command),
        _relocated_env(env, directory, final),
        job.ending,
        rows,
        profile,
        notes,
        server.summary() if server is not None else None,
    )
    for private in (D.CONTROL, D.PRIVATE, D.PROGRESS):
        _remove_tree(directory / private)
    return notes


def _relocated(rows: list[dict], directory: Path, final: Path) -> list[dict]:
    """Paths in the temporary directory as they are once it is renamed into place."""
    import json

    return json.loads(json.dumps(rows).replace(str(directory), str(final)))


def _relocated_env(env: JobEnvironment, directory: Path, final: Path) -> JobEnvironment:
    added = {k: v.replace(str(directory), str(final)) for k, v in env.added.items()}
    return JobEnvironment(env=env.env, added=added, replaced=env.replaced, settings=env.settings)


def _notes(rows: list[dict], ending: Ending) -> list[str]:
    notes = []
    lost_hook = [r for r in rows if r["python"] and not r["injob"] and r["readable"]]
    for row in lost_hook:
        why = (
            "its environment lost the capture's PYTHONPATH"
            if "PYTHONPATH" in row["capture_missing"]
            else "it was started with -S, -I or -E, or ended before Python's start-up finished"
        )
        notes.append(
            f"the in-job module did not run in pid {row['pid']} ({row['command']}): {why}; no "
            "progress, dumps or profile from it"
        )
    if ending.killed:
        notes.append("killed after the grace period: pid " + ", ".join(map(str, ending.killed)))
    return notes


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
