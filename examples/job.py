"""The README's env-check example: a launcher that starts a spawn worker, then sets NCCL_PROTO=LL in
its own os.environ, as a launcher that configures NCCL too late does.

    NCCL_P2P_LEVEL=sys python examples/job.py &
    ncclprobe env-check --pid $! --expect NCCL_PROTO=LL

The worker never gets NCCL_PROTO (it started before the assignment), and /proc/PID/environ of the
launcher still shows the environment it was started with (os.environ changes only the process's
memory), so env-check reports NCCL_PROTO missing in both, and lints NCCL_P2P_LEVEL=sys (a level name
NCCL compares case-sensitively) in all three processes: the launcher, multiprocessing's resource
tracker and the worker. Both sleep for SECONDS (default 120), then exit.
"""

import multiprocessing
import os
import sys
import time


def worker(seconds: float) -> None:
    time.sleep(seconds)


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    process = multiprocessing.get_context("spawn").Process(target=worker, args=(seconds,))
    process.start()
    os.environ["NCCL_PROTO"] = "LL"  # too late for the worker; /proc shows the start-up environment
    process.join()
