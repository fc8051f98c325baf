"""Faults are bounded by --timeout and blamed on the rank that caused them (issue 16 §6).

The pools of the launcher test run side by side in threads: each mostly waits (a hang is waiting),
so together they cost the longest bound, not the sum."""

import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import torch.distributed  # noqa: F401  (imported before timing: run_pool's first call would import it)
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.launch import PoolSpec, error_summary, run_pool

ENTRIES = "tests.pool_entries"


def _alive(pids):
    return [
        pid
        for pid in pids
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]


def _timed(spec):
    started = time.monotonic()
    outcome = run_pool(spec)
    return outcome, time.monotonic() - started


def test_every_hang_is_killed_at_its_timeout_and_a_killed_rank_is_named():
    hung_start = {
        t: PoolSpec(
            nranks=2,
            backend="gloo",
            entry="tests.pool_entries_hung_start:never_reached",
            timeout_s=t,
        )
        for t in (3.0, 5.0, 10.0)
    }
    silent = PoolSpec(nranks=2, backend="gloo", entry=f"{ENTRIES}:hang_on_rank1", timeout_s=4.0)
    killed = PoolSpec(nranks=2, backend="gloo", entry=f"{ENTRIES}:sigkill_rank1", timeout_s=60.0)
    with ThreadPoolExecutor(max_workers=5) as pool:
        futures = {
            key: pool.submit(_timed, spec)
            for key, spec in [*hung_start.items(), ("silent", silent), ("killed", killed)]
        }
        done = {key: future.result() for key, future in futures.items()}
    for timeout in hung_start:  # the start is bounded by --timeout, not 60 s
        outcome, wall = done[timeout]
        assert outcome.status == "hang" and "before any rank started" in outcome.reason, (
            outcome.reason
        )
        assert timeout <= wall < timeout + 4, (timeout, wall)
        assert _alive(outcome.pids.values()) == []
    outcome, _ = done["silent"]  # silence after the start: the same bound
    returned_at = time.time()
    # rank 1 sleeps, rank 0 waits for it: nothing tells them apart from outside (CPU time blamed
    # rank 0 when tried), so no rank is named; a stopped one is (tests/test_stopped_worker.py)
    assert outcome.reason == "no progress from any rank for 4 s; pool killed", outcome.reason
    assert 4.0 <= returned_at - max(m["t"] for m in outcome.messages)
    outcome, _ = done["killed"]
    assert outcome.status == "error"
    assert outcome.reason.startswith("rank 1 was killed by signal SIGKILL"), outcome.reason
    assert "rank 0" not in outcome.reason.split(";")[0]  # rank 0 only noticed the dead peer
    assert (
        "\n" not in outcome.reason
        and "Traceback" not in outcome.reason
        and 'File "' not in outcome.reason
    )
    assert _alive(outcome.pids.values()) == []


def test_the_error_line_of_a_traceback_is_kept_and_its_frames_are_not():
    tail = (
        'Traceback (most recent call last):\n  File "/x/worker.py", line 3, in main\n    entry(ctx)\n'
        "    ~~~~~^^^^^\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB\n"
    )
    assert (
        error_summary(tail)
        == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB"
    )
    assert error_summary("planted crash in config X\n") == "planted crash in config X"
    assert error_summary("") == ""


@pytest.mark.parametrize(
    "args, needle",
    [
        (["-k", "100000"], "more than tiny serves (4096)"),
        (["--prompt-len", "100000"], "more than tiny serves"),
        (["--new-tokens", "100000"], "more than tiny serves"),
        (["--batch", "100000000", "--prompt-len", "2000"], "GiB are free here"),
        (["--temperature", "nan"], "not a finite decimal number"),
        (["--temperature", "inf"], "not a finite decimal number"),
    ],
)
def test_run_engine_refuses_what_the_model_cannot_serve_before_any_worker_starts(args, needle):
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["run-engine", "--preset", "tiny", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.output
    assert time.monotonic() - started < 20  # refused up front, not after minutes of work


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--output", "/proc/x.safetensors"], "cannot write"),
        (["--output", "d.safetensors", "--lr", "nan"], "not a finite decimal number"),
        (["--output", "d.safetensors", "--gen-len", "100000"], "more than tiny serves"),
    ],
)
def test_train_draft_checks_its_output_and_limits_before_training(
    tmp_path, monkeypatch, args, needle
):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["train-draft", "--preset", "tiny", "--steps", "100000", *args]
    )
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
