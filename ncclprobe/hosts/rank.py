"""`python -m ncclprobe.hosts.rank MODULE [ARGS]`: run MODULE as a torch.distributed rank of a job
that srun or mpirun started.

srun and mpirun tell a process its rank in their own variables (SLURM_PROCID, OMPI_COMM_WORLD_RANK,
...); torch's env:// rendezvous reads RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE. This sets
torch's from the launcher's (`identity.torch_env`), in this process only, then runs MODULE as
`python -m MODULE` would. A malformed launcher variable is one line and exit 2.
"""

from __future__ import annotations

import os
import runpy
import sys

from ncclprobe.errors import UsageProblem
from ncclprobe.hosts.identity import torch_env


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m ncclprobe.hosts.rank MODULE [ARGS]", file=sys.stderr)
        return 2
    try:
        os.environ.update(torch_env(os.environ))
    except UsageProblem as exc:
        print(f"ncclprobe.hosts.rank: {exc}", file=sys.stderr)
        return 2
    sys.argv = argv
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
