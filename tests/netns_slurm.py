"""A Slurm cluster on the namespace hosts of `tests/netns_hosts.py`, for tests of the srun path.

Debian's slurm-wlm 22.05 (slurmctld, slurmd, srun) and munge, started here and nowhere else: a
munged of its own (its key, socket and files in the test's directory, run as the munge user), a
slurm.conf of its own (SLURM_CONF: no file under /etc is read or written), the controller on the
first host and a slurmd on every host, each in its host's namespaces, so a job's tasks run among
that host's processes only. Process tracking by /proc (no cgroups), no accounting. The TaskProlog
gives every task on the second host a setting the first host's tasks lack, as a site's per-node
prolog does, so a run through srun shows a setting that differs between hosts.

`unavailable()` says what is missing (CI installs none of it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.netns_hosts import Cluster

TOOLS = ("slurmctld", "slurmd", "srun", "sinfo", "munged", "runuser")
CONF = """ClusterName=ncclprobetest
SlurmctldHost={head}({head_addr})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge}/socket
CredType=cred/munge
SlurmctldPort=6917
SlurmdPort=6918
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.%n.log
TaskProlog={d}/taskprolog.sh
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
{nodes}PartitionName=test Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def unavailable() -> str | None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install slurmctld slurmd slurm-client munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user"
    return None


class Slurm:
    """slurmctld on the first host, slurmd on each; `env` is what a client (srun) needs."""

    def __init__(self, cluster: Cluster, profile_host: str, profile: str):
        self.cluster = cluster
        self.dir = cluster.workdir / f"slurm-{cluster.tag}"  # the tag: reaped if a test run dies
        self.env = {"SLURM_CONF": str(self.dir / "slurm.conf")}
        self.profile_host, self.profile = profile_host, profile
        self.munged_pid: int | None = None
        self.munge_dir: Path | None = None

    def start(self) -> Slurm:
        try:
            self._munge()
            self._config()
            head = self.cluster.names[0]
            self._on(head, "slurmctld -i")
            for name in self.cluster.names:
                self._on(name, "slurmd")
            self._wait_idle()
        except BaseException:
            self.close()
            raise
        return self

    def _munge(self) -> None:
        # munged runs as the munge user, which must reach its files: not under pytest's 0700 dirs
        munge = self.munge_dir = Path(tempfile.mkdtemp(prefix=f"{self.cluster.tag}-munge-"))
        shutil.copy("/etc/munge/munge.key", munge / "key")
        user = pwd.getpwnam("munge")
        for path in (munge, munge / "key"):
            os.chown(path, user.pw_uid, user.pw_gid)
        munge.chmod(0o711)
        (munge / "key").chmod(0o400)
        args = [
            f"--{k}={munge / v}"
            for k, v in (
                ("socket", "socket"),
                ("key-file", "key"),
                ("pid-file", "pid"),
                ("log-file", "log"),
                ("seed-file", "seed"),
            )
        ]
        subprocess.run(["runuser", "-u", "munge", "--", "munged", *args], check=True, timeout=30)
        self.munged_pid = int((munge / "pid").read_text().split()[0])

    def _config(self) -> None:
        d = self.dir
        for sub in ("state", "log", *(f"spool/{n}" for n in self.cluster.names)):
            (d / sub).mkdir(parents=True, exist_ok=True)
        prolog = d / "taskprolog.sh"
        prolog.write_text(
            f'#!/bin/sh\n[ "$(hostname)" = {self.profile_host} ] && echo "export {self.profile}"\nexit 0\n'
        )
        prolog.chmod(0o755)
        names = self.cluster.names
        nodes = "".join(
            f"NodeName={n} NodeAddr={self.cluster.address[n]} CPUs={os.cpu_count() or 1} State=UNKNOWN\n"
            for n in names
        )
        (d / "slurm.conf").write_text(
            CONF.format(
                d=d,
                munge=self.munge_dir,
                head=names[0],
                head_addr=self.cluster.address[names[0]],
                nodes=nodes,
                names=",".join(names),
            )
        )

    def _on(self, host: str, line: str) -> None:
        proc = self.cluster.run(host, f"SLURM_CONF={self.env['SLURM_CONF']} {line}")
        if proc.wait(timeout=60):
            raise RuntimeError(f"{line} on {host} failed; see {self.dir / 'log'}")

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            proc = self.cluster.run(
                self.cluster.names[0],
                f"SLURM_CONF={self.env['SLURM_CONF']} sinfo -h -N -o %T",
                launcher=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            states = proc.communicate(timeout=30)[0].split()
            if len(states) == len(self.cluster.names) and set(states) == {"idle"}:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Slurm nodes did not come up: {states}; see {self.dir / 'log'}"
                )
            time.sleep(0.5)

    def close(self) -> None:
        """The daemons end with their hosts (Cluster.close); munged, started here, ends here."""
        if self.munged_pid:
            try:
                os.kill(self.munged_pid, 15)
            except ProcessLookupError:
                pass
        if self.munge_dir:
            shutil.rmtree(self.munge_dir, ignore_errors=True)
