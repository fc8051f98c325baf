"""The launcher with real worker processes: rendezvous, environment, hang and crash handling."""

import os
from pathlib import Path

import psutil
import pytest

from ncclprobe.launch import PoolSpec, run_pool

ENTRIES = "tests.pool_entries"


def _alive(pids):
    return [
        pid
        for pid in pids
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]


def test_two_ranks_rendezvous_and_see_exactly_their_environment(monkeypatch):
    """One pool checks the rendezvous (exact sum), per-rank values and removal of inherited ones."""
    monkeypatch.setenv("NCCLPROBE_TEST_VAR", "inherited")
    spec = PoolSpec(
        nranks=2,
        backend="gloo",
        entry=f"{ENTRIES}:sum_ranks",
        unset=("NCCLPROBE_TEST_VAR",),
        rank_env={"NCCLPROBE_TEST_VAR": "rank-{rank}"},
        timeout_s=60,
    )
    outcome = run_pool(spec)
    assert outcome.status == "ok", outcome.reason
    sums = outcome.of_kind("sum")
    assert all(m["value"] == 3.0 for m in sums)  # ranks add 1 + 2
    assert {m["rank"]: m["env_probe"] for m in sums} == {0: "rank-0", 1: "rank-1"}
    # the two ranks share this machine's cores instead of each taking all of them
    assert {m["threads"] for m in sums} == {max(1, len(os.sched_getaffinity(0)) // 2)}


def test_worker_threads_can_be_overridden_and_a_bad_override_is_refused_before_any_rank_starts(
    monkeypatch,
):
    from ncclprobe.errors import UsageProblem
    from ncclprobe.worker import THREADS_ENV, worker_threads

    assert worker_threads(2, {THREADS_ENV: "3"}) == 3
    assert worker_threads(10_000, {}) == 1
    for bad in ("0", "two", "²", "-1"):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(UsageProblem, match=THREADS_ENV):
            run_pool(PoolSpec(nranks=2, backend="gloo", entry=f"{ENTRIES}:sum_ranks", timeout_s=60))


def test_unset_variables_stay_unset(monkeypatch):
    from ncclprobe.launch import worker_env

    monkeypatch.setenv("NCCLPROBE_TEST_VAR", "inherited")
    spec = PoolSpec(
        nranks=2,
        backend="gloo",
        entry="x:y",
        env={"NCCL_PROTO": "LL"},
        unset=("NCCLPROBE_TEST_VAR",),
    )
    env = worker_env(spec, 1, Path("/tmp/run"), 1234)
    assert "NCCLPROBE_TEST_VAR" not in env and env["NCCL_PROTO"] == "LL"
    assert (env["RANK"], env["WORLD_SIZE"], env["NCCLPROBE_STORE_PORT"]) == ("1", "2", "1234")


# The hang bounds (silence, and a hung start, at --timeout 3, 5 and 10 s) are in test_trust_faults.py,
# run side by side with the attribution of a SIGKILLed rank.


def test_crashed_rank_is_an_error_with_its_stderr():
    outcome = run_pool(
        PoolSpec(nranks=2, backend="gloo", entry=f"{ENTRIES}:crash_on_rank1", timeout_s=60)
    )
    assert outcome.status == "error"
    assert "rank 1 exited with exit code 1" in outcome.reason
    assert "planted crash in rank 1" in outcome.reason
    assert _alive(outcome.pids.values()) == []


def test_pool_spec_rejects_nonsense():
    with pytest.raises(ValueError):
        PoolSpec(nranks=0, backend="gloo", entry="x:y")
    with pytest.raises(ValueError):
        PoolSpec(nranks=1, backend="mpi", entry="x:y")


def test_a_failed_start_kills_the_ranks_already_started_and_removes_the_run_dir(
    monkeypatch, tmp_path
):
    import tempfile

    from ncclprobe import launch

    # kept (issue 38 §4): a failure to start the second rank (no file descriptors, no processes)
    # cannot be caused from outside without starving the machine; the seam is the rank's start
    real_start, started = launch._start, []

    def start_then_fail(spec, rank, run_dir, port):
        if rank == 1:  # e.g. out of file descriptors or processes at the second exec
            raise OSError("planted failure to start rank 1")
        started.append(real_start(spec, rank, run_dir, port))
        return started[-1]

    monkeypatch.setattr(launch, "_start", start_then_fail)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(OSError, match="planted"):
        run_pool(PoolSpec(nranks=2, backend="gloo", entry=f"{ENTRIES}:hang_on_rank1", timeout_s=60))
    assert len(started) == 1 and _alive([started[0].pid]) == []
    assert list(tmp_path.iterdir()) == []
