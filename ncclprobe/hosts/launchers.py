"""The launchers users already have, as one abstraction: what it takes to start a program on every
node of a job, through srun, torchrun or mpirun.

A `Hosts` says where the job runs and through what; `commands` turns one `Program` (a Python module,
the processes per node, the environment to set and unset) into the command lines to start here:

  srun      one command, inside a Slurm allocation (SLURM_JOB_ID) or with `--jobid` among the
            launcher arguments: `srun --nodes N --ntasks-per-node P ... env ... python -m MODULE`.
            Each task finds its rank in SLURM_PROCID (`ncclprobe.hosts.identity`); each task's
            output goes to `<log dir>/<node>.<task>.log` (srun's own `--output` pattern).
  mpirun    one command over `--hosts`: `mpirun -np N*P --host h1:P,h2:P ... env ... python -m
            MODULE`; ranks fill the hosts in order (OMPI_COMM_WORLD_RANK); as root it passes
            `--allow-run-as-root` (Open MPI refuses root without it).
  torchrun  one command per host, since torchrun starts processes on its own node only: `torchrun
            --nnodes N --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint HEAD:29400
            --rdzv-id RUN -m MODULE`, run on each host through the user's own way of reaching it
            (`node_exec`: `ssh {host}`, `pdsh -w {host}`, `ip netns exec ...`), which receives the
            line as one argument for a shell, as ssh does. The c10d rendezvous joins the nodes and
            gives each its GROUP_RANK.

Under srun and mpirun the ranks rendezvous through a TCPStore this process hosts (`store`: the
address the nodes reach it at, and its port), as `ncclprobe.launch` does on one host; srun and
mpirun connect back to the host they run on anyway, so it is reachable. Launcher arguments the
user gives (`launcher_args`) go in verbatim after ncclprobe's own; under torchrun `{host}` in them
is the node's name (`--local-addr={host}` where host names do not resolve on the nodes).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe import envvars
from ncclprobe.errors import UsageProblem
from ncclprobe.textenum import TextEnum

RDZV_PORT = 29400  # torchrun's own default port for the c10d rendezvous
SLURM_JOB = "SLURM_JOB_ID"


class Launcher(TextEnum):
    SRUN = "srun"
    TORCHRUN = "torchrun"
    MPIRUN = "mpirun"


@dataclass(frozen=True, kw_only=True)
class Hosts:
    """Where a job runs and through which launcher (see the module's docstring)."""

    launcher: Launcher
    hosts: tuple[str, ...] = ()  # torchrun, mpirun: every node in order; srun: --nodelist, or none
    nodes: int | None = None  # srun without hosts: how many nodes of the allocation (None: all)
    node_exec: tuple[str, ...] = ()  # torchrun: the words that run a shell line on {host}
    rdzv_endpoint: str | None = None  # torchrun: HOST:PORT (default: the first host, 29400)
    store_addr: str | None = None  # srun, mpirun: this host's address as the nodes reach it
    launcher_args: tuple[str, ...] = ()
    python: str = field(default_factory=lambda: sys.executable)

    def __post_init__(self):
        if self.launcher in (Launcher.TORCHRUN, Launcher.MPIRUN) and not self.hosts:
            raise UsageProblem(f"--launcher {self.launcher} needs --hosts (every node, in order)")
        if self.launcher is Launcher.TORCHRUN and not self.node_exec:
            raise UsageProblem(
                "--launcher torchrun starts processes on its own node only: give --node-exec, the "
                "way to run a command on each host (e.g. --node-exec 'ssh {host}'), or plan the "
                "commands to run by hand with sweep --torchrun-dir"
            )
        if self.node_exec and self.launcher is not Launcher.TORCHRUN:
            raise UsageProblem(
                f"--node-exec is for --launcher torchrun; {self.launcher} starts "
                "processes on every node itself"
            )
        if self.nodes is not None and self.hosts and self.nodes != len(self.hosts):
            raise UsageProblem(f"--nodes {self.nodes} but --hosts names {len(self.hosts)} hosts")

    def node_count(self, environ: Mapping[str, str] = os.environ) -> int:
        """How many nodes a launch spans: the hosts named, --nodes, else the Slurm allocation's."""
        if self.hosts:
            return len(self.hosts)
        if self.nodes is not None:
            return self.nodes
        from ncclprobe.numbers import parse_int

        for name in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
            if environ.get(name):
                return parse_int(environ[name], name, min=1)
        raise UsageProblem(
            "--launcher srun outside a Slurm allocation needs --nodes N (and "
            "--launcher-arg=--jobid=ID to attach to a job)"
        )

    def describe(self) -> dict:
        """What the results record of how the job was reached (no argument values: they may hold
        anything the user typed)."""
        return {
            "launcher": str(self.launcher),
            "hosts": list(self.hosts),
            "nodes": self.node_count() if self.hosts or self.nodes else None,
            "rdzv_endpoint": self.endpoint() if self.launcher is Launcher.TORCHRUN else None,
        }

    def endpoint(self) -> str:
        return self.rdzv_endpoint or f"{self.hosts[0]}:{RDZV_PORT}"


@dataclass(frozen=True, kw_only=True)
class Program:
    """What to start on every node: `python -m module args`, `per_node` processes per node (ranks;
    torchrun's --nproc-per-node), with `env` set and `unset` removed from the inherited environment."""

    module: str
    args: tuple[str, ...] = ()
    per_node: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeCommand:
    """One command line to start here: `label` is the host it runs on (torchrun) or the launcher
    (srun, mpirun: one command reaches every node)."""

    label: str
    argv: tuple[str, ...]


def detect(
    launcher: str | None,
    *,
    hosts: tuple[str, ...] = (),
    node_exec: tuple[str, ...] = (),
    environ: Mapping[str, str] = os.environ,
) -> Launcher:
    """`--launcher` as given, or (`auto`) the one this situation implies: srun inside a Slurm
    allocation, torchrun when a way to reach each host is given, mpirun over plain --hosts."""
    if launcher and launcher != "auto":
        return Launcher(launcher)
    if environ.get(SLURM_JOB) and shutil.which("srun") and not node_exec:
        return Launcher.SRUN
    if node_exec:
        return Launcher.TORCHRUN
    if hosts and shutil.which("mpirun"):
        return Launcher.MPIRUN
    raise UsageProblem(
        "no launcher found here: inside a Slurm allocation srun is used; otherwise give --hosts "
        "with --node-exec 'ssh {host}' (torchrun) or --launcher mpirun"
    )


def commands(
    hosts: Hosts,
    program: Program,
    *,
    run_id: str,
    log_dir: Path,
    store: tuple[str, int] | None = None,
    environ: Mapping[str, str] = os.environ,
) -> list[NodeCommand]:
    """The command lines that start `program` on every node (see the module's docstring). `store`
    (srun, mpirun): the rendezvous store this process hosts, for ranks that join one (None for
    processes that do not); `log_dir`: where srun and mpirun write each task's output."""
    nodes = hosts.node_count(environ)
    if hosts.launcher is Launcher.TORCHRUN:
        return [_torchrun(hosts, program, host, nodes, run_id) for host in hosts.hosts]
    env = dict(program.env)
    if store is not None:  # ranks that rendezvous: through the store hosted here
        env.update(
            {
                "MASTER_ADDR": store[0],
                "MASTER_PORT": str(store[1]),
                envvars.STORE_PORT: str(store[1]),
            }
        )
    tail = _env_words(env, program.unset) + (hosts.python, "-m", RANK_ENTRY, program.module)
    tail += program.args
    if hosts.launcher is Launcher.SRUN:
        head = _srun(hosts, program.per_node, nodes, log_dir)
    else:
        head = _mpirun(hosts, program.per_node, log_dir)
    return [NodeCommand(str(hosts.launcher), head + hosts.launcher_args + tail)]


# srun and mpirun start `python -m ncclprobe.hosts.rank MODULE`: their rank variables become
# torch's (`identity.torch_env`) before MODULE runs
RANK_ENTRY = "ncclprobe.hosts.rank"


def _srun(hosts: Hosts, per_node: int, nodes: int, log_dir: Path) -> tuple[str, ...]:
    words: tuple[str, ...] = (
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes * per_node}",
        f"--ntasks-per-node={per_node}",
        "--kill-on-bad-exit=1",
        f"--output={log_dir}/%N.%t.log",
    )
    if hosts.hosts:
        words += (f"--nodelist={','.join(hosts.hosts)}",)
    return words


def _mpirun(hosts: Hosts, per_node: int, log_dir: Path) -> tuple[str, ...]:
    words: tuple[str, ...] = (
        "mpirun",
        "-np",
        str(len(hosts.hosts) * per_node),
        "--host",
        ",".join(f"{host}:{per_node}" for host in hosts.hosts),
        "--map-by",
        "slot",
        "--output-filename",
        str(log_dir / "mpirun"),
    )
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        words += ("--allow-run-as-root",)
    return words


def _torchrun(hosts: Hosts, program: Program, host: str, nodes: int, run_id: str) -> NodeCommand:
    line = _env_words(program.env, program.unset) + (
        hosts.python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nodes}",
        f"--nproc-per-node={program.per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={hosts.endpoint()}",
        f"--rdzv-id={run_id}",
        *(arg.replace("{host}", host) for arg in hosts.launcher_args),
        "-m",
        program.module,
        *program.args,
    )
    prefix = tuple(word.replace("{host}", host) for word in hosts.node_exec)
    return NodeCommand(host, prefix + (shlex.join(line),))


def _env_words(env: Mapping[str, str], unset: tuple[str, ...]) -> tuple[str, ...]:
    """`env -u A -u B K=V ...`: the program's environment, whatever the launcher passes on."""
    words: tuple[str, ...] = ("env",)
    for name in unset:
        words += ("-u", name)
    return words + tuple(f"{key}={value}" for key, value in env.items())


def route_address(host: str, port: int = RDZV_PORT) -> str:
    """This host's address on the route to `host` (a UDP socket's local end after connect(), which
    sends nothing): the address a store hosted here is reached at from there."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, proto=socket.IPPROTO_UDP)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return probe.getsockname()[0]
    except OSError as exc:
        raise UsageProblem(
            f"no route from here to host {host!r} ({exc}); give --store-addr, this host's address "
            "as the nodes reach it"
        ) from None


def store_address(hosts: Hosts) -> str:
    """Where the nodes reach a store hosted here: --store-addr, else this host's address on the
    route to the first host (mpirun), else this host's name (srun: Slurm's nodes resolve it)."""
    if hosts.store_addr:
        return hosts.store_addr
    if hosts.hosts:
        return route_address(hosts.hosts[0])
    return socket.getfqdn()
