"""Ctrl-C during a sweep's start-up is never lost (issue 29 §2): exit 130, and the results file is
absent or whole up to its last record, whenever the signal comes.

The window was the import of torch and numpy: a KeyboardInterrupt raised inside them was cleared by
torch's C code (the sweep ran on and exited 0) or left numpy half-loaded (exit 4 at its next
import). So the signal is sent at the moments that matter, seen from outside in /proc: as soon as
ncclprobe has installed its handlers, while numpy's extension and torch's library are being
loaded, and then at random delays over the start-up, as many as a time budget allows. A real
sweep each time (gloo, 2 ranks), in a fresh TMPDIR that must be left empty of ncclprobe's
directories. Before ncclprobe's own code runs, the interpreter's start-up is Python's (an
interrupt there ends it by SIGINT): each try waits for ncclprobe's handlers first.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

SWEEP = ["sweep", "--backend", "gloo", "--nranks", "2", "--sizes", "4K", "--proto", "default"]
SWEEP += ["--algo", "default", "--iters", "1", "--trials", "1", "--warmup", "0", "--timeout", "30"]
BUDGET_S = 4  # the random tries stop starting after this (the fixed moments above come first)
BOUND_S = 90  # one try; a lost Ctrl-C runs the sweep to its end well within it


def _handlers_installed(pid: int) -> bool:
    """SIGTERM caught: `interrupts.install()` ran, ncclprobe's own code is in charge."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(
        next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16
    )
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def _mapped(pid: int, library: str) -> bool:
    return library in Path(f"/proc/{pid}/maps").read_text()


def _wait(proc: subprocess.Popen, ready, deadline: float) -> bool:
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if ready(proc.pid):
                return True
        except (OSError, StopIteration):
            pass
        time.sleep(0.002)
    return False


def _try(tmp: Path, moment) -> tuple[int | None, str]:
    """One sweep interrupted at `moment` (a callable of the pid; None: at once after the handlers);
    its exit code, None when it ended before the signal could be sent."""
    out = tmp / "sweep.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ncclprobe", *SWEEP, "--output", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        deadline = time.monotonic() + BOUND_S
        assert _wait(proc, _handlers_installed, deadline), proc.communicate()[1]
        if moment is not None:
            _wait(proc, moment, deadline)  # may find the moment passed: the signal still goes
        if proc.poll() is not None:  # a fast machine finished the sweep first: nothing to test
            return None, proc.communicate()[1]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _check_left(tmp, out)
    return proc.returncode, err


def _check_left(tmp: Path, out: Path) -> None:
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("ncclprobe-")]
    if out.exists():  # a journal: whole up to its last fsynced record
        text = out.read_text()
        assert text.endswith("\n")
        records = [json.loads(line) for line in text.splitlines()]
        assert records[0]["record"] == "header" and len(records) > 1, "a bare header is removed"


def _after(seconds: float):
    """A moment `seconds` after its first look (made once the handlers are installed)."""
    first = []

    def reached(_pid) -> bool:
        first.append(time.monotonic())
        return first[-1] - first[0] >= seconds

    return reached


def test_ctrl_c_at_any_moment_of_start_up_exits_130_and_leaves_nothing_half_written(tmp_path):
    moments = {  # the numpy one lost the Ctrl-C every time before the fix (exit 0)
        "handlers installed": None,
        "numpy's extension loading": lambda pid: _mapped(pid, "_multiarray_umath"),
        "torch's library loading": lambda pid: _mapped(pid, "libtorch_cpu"),
    }
    rng = random.Random(29)
    # children the suite had before (multiprocessing's resource tracker lives as long as pytest)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    started = time.monotonic()
    n = 0
    while n < len(moments) or time.monotonic() - started < BUDGET_S:
        if n < len(moments):
            name, moment = list(moments.items())[n]
        else:
            delay = rng.uniform(0, 2.5)
            name, moment = f"{delay:.2f} s after the handlers", _after(delay)
        tmp = tmp_path / f"try{n}"
        tmp.mkdir()
        code, err = _try(tmp, moment)
        n += 1
        if code is None:
            continue
        assert code == 130, f"{name}: exit {code}\n{err}"
        assert err.strip().splitlines()[-1].startswith("ncclprobe: interrupted (Ctrl-C); "), err
        assert not [
            p
            for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and p.pid not in before
        ]
