"""Who a process started by a launcher is: its rank, the world, its node, read from the launcher's
own variables.

torch.distributed's env:// rendezvous reads RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE;
torchrun sets them (and GROUP_RANK, the node's index that its c10d rendezvous assigned). srun and
mpirun set their own names instead (read in their documentation and, for Open MPI 4.1, in a real
process's environment):

  Slurm (srun)        SLURM_PROCID  SLURM_NTASKS  SLURM_LOCALID  SLURM_NTASKS_PER_NODE  SLURM_NODEID
  Open MPI (mpirun)   OMPI_COMM_WORLD_RANK  _SIZE  _LOCAL_RANK  _LOCAL_SIZE   (no node index)
  MPICH, Intel MPI    PMI_RANK  PMI_SIZE  MPI_LOCALRANKID  MPI_LOCALNRANKS        (no node index)

`torch_env` turns whichever is present into torch's names (torchrun's own win when they are set:
a torchrun started by srun keeps torchrun's ranks). Every value is parsed strictly: a launcher that
set a bad one is named, rather than a rank guessed.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass

from ncclprobe.errors import UsageProblem
from ncclprobe.numbers import parse_int


@dataclass(frozen=True)
class Scheme:
    """One launcher's variable names for torch's four (and the node's index, where it has one)."""

    launcher: str
    rank: str
    world_size: str
    local_rank: str
    local_world_size: str
    node_rank: str | None


SCHEMES = (
    Scheme("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"),
    Scheme(
        "srun",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_NODEID",
    ),
    Scheme(
        "mpirun",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        None,
    ),
    Scheme("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", None),
)


@dataclass(frozen=True)
class Identity:
    launcher: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int | None  # None: the launcher does not say (MPI: the host name tells the node)


def identify(environ: Mapping[str, str]) -> Identity | None:
    """This process's identity from the first launcher whose rank and world size are set; None
    when no launcher started it. UsageProblem naming the variable when a value is malformed."""
    for scheme in SCHEMES:
        if scheme.rank in environ and scheme.world_size in environ:
            return _read(scheme, environ)
    return None


def _read(scheme: Scheme, environ: Mapping[str, str]) -> Identity:
    world = _int(environ, scheme.world_size, min=1)
    rank = _int(environ, scheme.rank, min=0, max=world - 1)
    local_world = _int(environ, scheme.local_world_size, min=1, default=1)
    local_rank = _int(environ, scheme.local_rank, min=0, max=local_world - 1, default=0)
    named = scheme.node_rank
    node = _int(environ, named, min=0) if named and named in environ else None
    return Identity(scheme.launcher, rank, world, local_rank, local_world, node)


def _int(
    environ: Mapping[str, str], name: str, *, default: int | None = None, **bounds: int
) -> int:
    """The variable as a whole number within `bounds`; `default` where it is not set (None: it
    must be)."""
    if name not in environ:
        if default is None:
            raise UsageProblem(f"{name} is not set")
        return default
    text = environ[name].strip()
    if "(" in text:  # SLURM_NTASKS_PER_NODE of a heterogeneous step: `2(x3)`; the local ids tell
        text = text.split("(")[0]
    return parse_int(text, name, **bounds)


def torch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables env:// needs, from the launcher that started this process ({} when torchrun
    did, or when none did): set them before torch.distributed initializes."""
    identity = identify(environ)
    if identity is None or identity.launcher == "torchrun":
        return {}
    out = {
        "RANK": str(identity.rank),
        "WORLD_SIZE": str(identity.world_size),
        "LOCAL_RANK": str(identity.local_rank),
        "LOCAL_WORLD_SIZE": str(identity.local_world_size),
    }
    if identity.node_rank is not None:
        out["GROUP_RANK"] = str(identity.node_rank)
    return out


def host_name() -> str:
    """This node's name as its peers and the user know it (`uname -n`, what NCCL prints as %h)."""
    return socket.gethostname()


def host_aliases() -> list[str]:
    """Every name and address this node answers to (its name, its full name, each interface's
    address): a host given as `10.0.0.7` or `gpu7.cluster` is found again as the `gpu7` it calls
    itself."""
    import psutil

    names = {host_name(), socket.getfqdn()}
    for addresses in psutil.net_if_addrs().values():
        names.update(
            a.address.split("%")[0]
            for a in addresses
            if a.family in (socket.AF_INET, socket.AF_INET6)
        )
    return sorted(names)
