"""A worker stopped with SIGSTOP (issue 29 §2) cannot hang a pool past its --timeout, and the hang
is blamed on the stopped rank.

Real workers, really stopped. The timeout is 6 s on purpose: the bug needed more than a few
seconds, the time a peer waiting at the rendezvous takes to spend 20 ms of CPU (its store polls),
which the old watchdog took for progress. The sweep and the mid-run pool run side by side: each
mostly waits, so together they cost the longest, not the sum. Every stopped process is killed in
`finally`, whatever the test found.
"""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import torch.distributed  # noqa: F401  (imported before timing: run_pool's first call would import it)

from ncclprobe.launch import PoolSpec, run_pool

TIMEOUT_S = 6
BOUND_S = 90  # a hang is a failure, never a test that does not end


def _rank_process(parent: psutil.Process, rank: int, deadline: float) -> psutil.Process:
    """`parent`'s worker of `rank`, as soon as it exists (its interpreter still starting)."""
    while time.monotonic() < deadline:
        for child in parent.children(recursive=True):
            try:
                if "ncclprobe.worker" in child.cmdline() and child.environ().get("RANK") == str(
                    rank
                ):
                    return child
            except psutil.Error:
                continue
        time.sleep(0.005)
    raise AssertionError(f"no worker of rank {rank} appeared")


def _sweep_with_rank1_stopped_at_start(tmp_path):
    out = tmp_path / "sweep.jsonl"
    argv = [sys.executable, "-m", "ncclprobe", "sweep", "--backend", "gloo", "--nranks", "2"]
    argv += ["--sizes", "4K", "--proto", "default", "--algo", "default"]
    argv += ["--timeout", str(TIMEOUT_S), "--output", str(out)]
    started = time.monotonic()
    sweep = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stopped = None
    try:
        stopped = _rank_process(psutil.Process(sweep.pid), 1, started + BOUND_S)
        stopped.send_signal(signal.SIGSTOP)
        sweep.communicate(timeout=BOUND_S)
        return sweep.returncode, out, time.monotonic() - started, stopped.pid
    finally:
        _end(sweep, stopped)


def _pool_with_rank1_stopped_mid_run():
    stopped = {}

    def on_message(message):  # rank 1 stops after its third tick: mid-run, peers waiting
        if message["kind"] == "ready" and message["rank"] == 1:
            stopped["pid"] = message["pid"]
        if message["kind"] == "tick" and message["rank"] == 1 and message["n"] == 2:
            os.kill(stopped["pid"], signal.SIGSTOP)
            stopped["t"] = message["t"]

    spec = PoolSpec(nranks=2, backend="gloo", entry="tests.pool_entries:ticks", timeout_s=TIMEOUT_S)
    try:
        return run_pool(spec, on_message=on_message), stopped, time.time()
    finally:
        if "pid" in stopped:
            _kill(stopped["pid"])


def _end(proc: subprocess.Popen, stopped: psutil.Process | None) -> None:
    if stopped is not None:
        _kill(stopped.pid)
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def _kill(pid: int) -> None:
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_stopped_rank_ends_the_pool_at_the_timeout_and_is_named(tmp_path):
    with ThreadPoolExecutor(max_workers=2) as pool:
        at_start = pool.submit(_sweep_with_rank1_stopped_at_start, tmp_path)
        mid_run = pool.submit(_pool_with_rank1_stopped_mid_run)
        code, out, wall, start_pid = at_start.result(timeout=BOUND_S + 20)
        outcome, stopped, returned_at = mid_run.result(timeout=BOUND_S + 20)

    # stopped while its interpreter started: the sweep records a hang naming rank 1 and ends
    records = [json.loads(line) for line in out.read_text().splitlines()]
    (config,) = [r for r in records if r["record"] == "config"]
    assert code == 1 and config["status"] == "hang", (code, config)
    assert config["reason"].startswith(
        f"no progress for {TIMEOUT_S} s from rank 1 (stopped by a signal; never reached the "
        "rendezvous)"
    ), config["reason"]
    assert "rank 0" not in config["reason"] and records[-1]["record"] == "summary"
    assert wall < BOUND_S and _gone(start_pid)

    # stopped mid-run: named, and declared at the timeout after the last progress, not later
    assert outcome.status == "hang", outcome.reason
    assert outcome.reason.startswith(
        f"no progress for {TIMEOUT_S} s from rank 1 (stopped by a signal) while the others waited"
    ), outcome.reason
    last = max(m["t"] for m in outcome.messages)
    assert last >= stopped["t"] and TIMEOUT_S <= returned_at - last < TIMEOUT_S + 5
    assert all(_gone(pid) for pid in outcome.pids.values())
