"""Settings of the test session.

One torch intra-op thread in the test process. The suite's tensors are tiny and the CI machine has
two cores, shared with the worker processes the tests start; torch's default (a thread per core)
makes its threads spin against each other and everything else on the machine. Measured on the
shared 2-core machine: the draft-training test took 150 s with two threads and 11 s with one. The
computations are the same; worker processes set their own threads (`ncclprobe.worker`).
"""

import torch


def pytest_configure(config):
    torch.set_num_threads(1)
