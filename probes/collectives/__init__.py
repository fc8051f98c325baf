"""One file per collective behind the small interface in `base.Collective` (nccl-tests' testColl).

`COLLECTIVES` maps the name used on the command line and in result records to the implementation.
"""

from ncclprobe.probes.collectives.all_reduce import AllReduce
from ncclprobe.probes.collectives.base import Collective

COLLECTIVES: dict[str, Collective] = {c.name: c for c in (AllReduce(),)}

__all__ = ["COLLECTIVES", "Collective"]
