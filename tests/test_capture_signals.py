"""`ncclprobe capture` around small real jobs (Python without torch: seconds each): the job gets the
signal it would have got without the capture (a terminal's Ctrl-C once, a `kill` of the capture passed
on), the exit code is the job's own where it failed, the in-job module dumps every thread's stack on
SIGUSR1 to the capture, and bad usage is one line before anything runs."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# records every SIGINT/SIGTERM it gets, says it is ready, stops after the first and a grace, and exits
# as a process killed by it would report (128 + signal)
JOB = """
import os, signal, sys, time
got = []
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda s, f: got.append(s))
print("ready", flush=True)
deadline = time.time() + float(os.environ.get("JOB_S", "30"))
while not got and time.time() < deadline:
    time.sleep(0.05)
time.sleep(1.0)
open(os.environ["MARK"], "w").write(",".join(map(str, got)))
sys.exit(128 + got[0] if got else int(os.environ.get("JOB_CODE", "0")))
"""


def _capture(tmp_path, *extra, job=JOB, **env):
    out = tmp_path / "cap"
    command = [
        sys.executable,
        "-m",
        "ncclprobe",
        "capture",
        "--output",
        str(out),
        "--profile",
        "off",
    ]
    environ = {**os.environ, "MARK": str(tmp_path / "mark"), **env}
    return out, command + list(extra) + ["--", sys.executable, "-c", job], environ


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _wait_for(stream, text: bytes, limit_s: float = 60.0) -> bytes:
    seen, deadline = b"", time.monotonic() + limit_s
    while text not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 0.5)
        if ready:
            chunk = os.read(stream.fileno() if hasattr(stream, "fileno") else stream, 4096)
            if not chunk:
                break
            seen += chunk
    assert text in seen, seen[-2000:]
    return seen


def test_kill_of_the_capture_reaches_the_job_once_and_its_code_is_the_capture_s(tmp_path):
    out, command, env = _capture(tmp_path)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(proc.stdout, b"ready")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "mark").read_text() == str(int(signal.SIGTERM))
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    manifest = _manifest(out)
    assert manifest["ended_by"] == "terminated" and manifest["exit_code"] == 143
    assert any("forwarded to pid" in s for s in manifest["signals"])


def test_a_terminal_ctrl_c_reaches_the_job_once(tmp_path):
    out, command, env = _capture(tmp_path)
    pid, master = pty.fork()
    if pid == 0:  # the child: a session of its own on the pty, as in a terminal
        os.execve(sys.executable, command, env)
    try:
        _wait_for(master, b"ready")
        os.write(master, b"\x03")  # the terminal's Ctrl-C: SIGINT to the foreground group
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if select.select([master], [], [], 0.2)[0]:
                try:
                    os.read(master, 65536)
                except OSError:
                    pass
        else:
            pytest.fail("the capture did not end after Ctrl-C")
    finally:
        os.close(master)
    assert (tmp_path / "mark").read_text() == str(int(signal.SIGINT))  # once: not forwarded again
    assert os.waitstatus_to_exitcode(status) == 130
    manifest = _manifest(out)
    assert manifest["ended_by"] == "interrupt"
    assert any("from the terminal" in s for s in manifest["signals"])


def test_a_failed_job_gives_its_own_exit_code(tmp_path):
    out, command, env = _capture(tmp_path, JOB_S="0", JOB_CODE="3")
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stderr
    manifest = _manifest(out)
    assert manifest["exit_code"] == 3 and manifest["ended_by"] == "exit"
    assert f"{out}/" in run.stderr and "diagnosis of capture" in run.stdout


def test_sigusr1_dumps_every_thread_of_the_job(tmp_path):
    sleeper = "import time\nprint('ready', flush=True)\ntime.sleep(4)\n"
    out, command, env = _capture(tmp_path, job=sleeper)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(proc.stdout, b"ready")
        time.sleep(0.5)  # the in-job watcher is up
        proc.send_signal(signal.SIGUSR1)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    (stacks,) = (out / "stacks").glob("*.txt")
    text = stacks.read_text()
    assert "the capture asked (signal)" in text and 'File "<string>", line 3 in <module>' in text
    manifest = _manifest(out)
    assert any("SIGUSR1" in s for s in manifest["signals"])
    assert manifest["collected"]["stacks"] and manifest["collected"]["injob"]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give the command to capture"),
        (["--server", "http://10.0.0.1:8000", "--", "true"], "only a loopback address"),
        (["--profile", "7-3", "--", "true"], "FIRST <= LAST"),
    ],
)
def test_bad_usage_is_one_line_before_anything_runs(tmp_path, args, message):
    run = subprocess.run(
        [sys.executable, "-m", "ncclprobe", "capture", "--output", str(tmp_path / "c"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and message in run.stderr and len(run.stderr.splitlines()) == 1
    assert not (tmp_path / "c").exists()


def test_an_existing_directory_is_refused(tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("the user's\n")
    run = subprocess.run(
        [sys.executable, "-m", "ncclprobe", "capture", "--output", str(taken), "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "not empty" in run.stderr
    assert (taken / "mine.txt").read_text() == "the user's\n"
