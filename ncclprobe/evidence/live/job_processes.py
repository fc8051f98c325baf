"""Which processes on this host belong to a job, when its process ids are not known in advance.

On each node of a multi-node job a user has what the launcher gave them, not a pid: a Slurm job id,
torchrun's rendezvous id, a command line they typed. Every launcher puts its job's id in the
environment of the processes it starts, which /proc shows (`evidence.live.environ`):

  Slurm        SLURM_JOB_ID=<job id>          in every task of every step of the job
  torchrun     TORCHELASTIC_RUN_ID=<--rdzv-id> in every worker (torchrun's own default id: `none`)
  Open MPI     OMPI_MCA_ess_base_jobid=<id>   in every rank (PMIX_NAMESPACE too)

A `JobSelector` takes such NAME=VALUE pairs (all must hold) and/or a piece of the command line (a
plain substring: a pattern from the command line is never run as a regular expression); `job_roots`
returns the topmost matching processes, whose trees env-check walks. ncclprobe's own processes
that look for the job (they carry `AGENT`, and inherit the job's id under srun) are never taken.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from ncclprobe import envvars
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.live.environ import EnvironUnreadable, read_environ

AGENT = envvars.JOB_AGENT  # set in the environment of ncclprobe's own per-node processes


@dataclass(frozen=True)
class JobSelector:
    env: tuple[tuple[str, str], ...] = ()
    command: str | None = None

    def __post_init__(self) -> None:
        if not self.env and not self.command:
            raise UsageProblem(
                "say which job: --job NAME=VALUE (e.g. SLURM_JOB_ID=1234) or --match TEXT"
            )

    @classmethod
    def parse(cls, pairs: tuple[str, ...] = (), command: str | None = None) -> JobSelector:
        env = []
        for pair in pairs:
            name, sep, value = pair.partition("=")
            if not sep or not name.strip():
                raise UsageProblem(f"--job {pair!r}: expected NAME=VALUE, e.g. SLURM_JOB_ID=1234")
            env.append((name.strip(), value))
        return cls(tuple(env), command or None)

    def describe(self) -> dict:
        return {"env": dict(self.env), "command": self.command}

    def args(self) -> list[str]:
        """The selector as command-line words, to hand to the agents on the nodes."""
        words = [word for name, value in self.env for word in ("--job", f"{name}={value}")]
        return words + (["--match", self.command] if self.command else [])


def job_roots(selector: JobSelector) -> list[int]:
    """The topmost processes of the job on this host (a match whose parent does not match), in pid
    order; empty when none matches."""
    parent_of: dict[int, int | None] = {}
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        info = proc.info
        if info["pid"] == os.getpid() or not _matches(selector, info["pid"], info["cmdline"]):
            continue
        parent_of[info["pid"]] = info["ppid"]
    return sorted(pid for pid, ppid in parent_of.items() if ppid not in parent_of)


def _matches(selector: JobSelector, pid: int, cmdline: list[str] | None) -> bool:
    if selector.command and selector.command not in " ".join(cmdline or ()):
        return False
    try:
        environ = read_environ(pid)
    except EnvironUnreadable:
        return not selector.env  # an environment not readable here: judged by its command line
    if AGENT in environ:
        return False
    return all(environ.get(name) == value for name, value in selector.env)
