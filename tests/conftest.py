"""Settings of the test session, and what its modules share.

One torch intra-op thread in the test process. The suite's tensors are tiny and the CI machine has
two cores, shared with the worker processes the tests start; torch's default (a thread per core)
makes its threads spin against each other and everything else on the machine. Measured on the
shared 2-core machine: the draft-training test took 150 s with two threads and 11 s with one. The
computations are the same; worker processes set their own threads (`ncclprobe.worker`).
"""

import dataclasses
import os
import signal
from pathlib import Path

import pytest
import torch

# the suite's groups under pytest-xdist, and NCCLPROBE_TESTS_CPU's per-test costs (hooks, by name)
from tests.suite_schedule import (  # noqa: F401
    pytest_cmdline_main,
    pytest_collection_modifyitems,
    pytest_configure_node,
    pytest_runtest_protocol,
    pytest_xdist_make_scheduler,
)
from tests.suite_schedule import pytest_configure as _schedule_configure

# A suite started with SIGINT ignored (`cmd &` from a non-interactive shell) hands that on to every
# process it starts, and the Ctrl-C tests would wait for an interrupt that never lands (seen
# 2026-12-06: three failures, all of them this). A handler, unlike SIG_IGN, is reset at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config):
    torch.set_num_threads(1)
    _schedule_configure(config)


TESTS = Path(__file__).resolve().parent
SHIPPED = (TESTS / "fixtures", TESTS.parent / "examples")  # read-only recordings


@pytest.fixture(scope="session")
def _shipped_timelines() -> dict:
    return {}


@pytest.fixture(scope="module")
def shared_timelines(_shipped_timelines):
    """The shipped profiler traces (tests/fixtures, examples) parsed once per session, not once per
    module that reads them: several modules diagnose the same recordings (the HF, H200 and ranks
    traces), and a read costs 0.3-2 s on 2 cores. Within a module that opts in, the profile
    reader's `read_timeline` returns the Timeline the real reader made from that file the first
    time, named by the path it is given now (the output prints it); the steps, phases and findings
    are found again from it by the code under test, which never changes a Timeline (checked by
    hashing each one at every reuse over these modules, in both orders, when this was written).
    Any other file (a test's own, in tmp_path) is read for real every time, and so is every file
    under NCCLPROBE_TESTS_UNCACHED=1 (for a mutation tool, which maps each test to the functions it
    calls: a cache hides them; tests/test_profile_ranks.py)."""
    from ncclprobe.evidence.run import profile
    from ncclprobe.evidence.run.profile.timeline import read_timeline

    def read(path):
        resolved = Path(path).resolve()
        if os.environ.get("NCCLPROBE_TESTS_UNCACHED") or not any(
            resolved.is_relative_to(root) for root in SHIPPED
        ):
            return read_timeline(str(path))
        stat = resolved.stat()
        key = (str(resolved), stat.st_mtime_ns, stat.st_size)
        if key not in _shipped_timelines:
            _shipped_timelines[key] = read_timeline(str(path))
        # as the reader would name it now: the path as given (the output prints it), the parse shared
        return dataclasses.replace(_shipped_timelines[key], path=str(path))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profile, "read_timeline", read)
        yield read
