"""`env-check --launcher`'s evidence, gathered on every node of a job: an agent per node started
through the user's launcher (`ncclprobe.hosts`), each writing its host's env-check document to a
shared directory, read back as one `HostsEnvEvidence`.

The agent (`python -m ncclprobe.diagnose.process_env.node_agent`) carries ncclprobe's agent mark in its
environment (`evidence.live.job_processes.AGENT`), so it never takes itself for the job. Under srun
it runs as a step beside the job's own (`--overlap`), in the job's allocation (`--jobid`, when the
job is named by SLURM_JOB_ID and this is not already inside it).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from ncclprobe import envvars
from ncclprobe.evidence.live.host_env_checks import (
    FOLDER,
    HostsEnvEvidence,
    read_host_checks,
)
from ncclprobe.evidence.live.job_processes import JobSelector
from ncclprobe.hosts.launchers import Hosts, Launcher, Program, commands
from ncclprobe.hosts.run import newest_change, run_launch
from ncclprobe.safe_output import check_output_dir

AGENT_MODULE = "ncclprobe.diagnose.process_env.node_agent"
TIMEOUT_S = 120.0  # an agent walks its host's processes in seconds; silence this long is a hang


def gather_env_checks(
    hosts: Hosts,
    shared_dir: str | Path,
    selector: JobSelector,
    agent_args: tuple[str, ...] = (),
    *,
    timeout_s: float = TIMEOUT_S,
) -> HostsEnvEvidence:
    """Start the agents on every node, wait for them, read what they wrote. `agent_args`: the
    expectations, as the agents' own options (--expect NAME=VALUE, --expect-from FILE, --all)."""
    directory = check_output_dir(shared_dir, what="--shared-dir", has_force=False).absolute()
    (directory / FOLDER).mkdir(parents=True, exist_ok=True)
    program = Program(
        module=AGENT_MODULE,
        args=("--out", str(directory), *selector.args(), *agent_args),
        per_node=1,
        env={envvars.JOB_AGENT: "1"},
    )
    launched = hosts if hosts.launcher is not Launcher.SRUN else _beside_the_job(hosts, selector)
    nodes_dir = directory / "nodes"
    outcome = run_launch(
        commands(
            launched, program, run_id=f"ncclprobe-env-{uuid.uuid4().hex[:12]}", log_dir=nodes_dir
        ),
        log_dir=nodes_dir,
        timeout_s=timeout_s,
        activity=lambda: newest_change(directory / FOLDER),
    )
    return HostsEnvEvidence(
        checks=read_host_checks(directory),
        expected=hosts.hosts or hosts.node_count(),
        launch=outcome.to_json(),
        selector=selector.describe(),
        launcher=str(hosts.launcher),
    )


def _beside_the_job(hosts: Hosts, selector: JobSelector) -> Hosts:
    """srun: a step beside the job's running ones, in the job's allocation."""
    extra: tuple[str, ...] = ("--overlap",)
    job = dict(selector.env).get("SLURM_JOB_ID")
    if job and os.environ.get("SLURM_JOB_ID") != job:
        extra += (f"--jobid={job}",)
    from dataclasses import replace

    return replace(hosts, launcher_args=extra + hosts.launcher_args)
