"""One file per collective behind the small interface in `base.Collective` (nccl-tests' testColl).

`COLLECTIVES` maps the name used on the command line and in result records to the implementation,
in nccl-tests' order.
"""

from ncclprobe.probes.collectives.all_gather import AllGather
from ncclprobe.probes.collectives.all_reduce import AllReduce
from ncclprobe.probes.collectives.alltoall import AlltoAll
from ncclprobe.probes.collectives.base import Collective
from ncclprobe.probes.collectives.broadcast import Broadcast
from ncclprobe.probes.collectives.reduce import Reduce
from ncclprobe.probes.collectives.reduce_scatter import ReduceScatter
from ncclprobe.probes.collectives.sendrecv import SendRecv

COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        AllReduce(),
        AllGather(),
        ReduceScatter(),
        Broadcast(),
        Reduce(),
        AlltoAll(),
        SendRecv(),
    )
}
BY_NCCL_NAME: dict[str, Collective] = {c.nccl_name: c for c in COLLECTIVES.values()}

__all__ = ["BY_NCCL_NAME", "COLLECTIVES", "Collective"]
