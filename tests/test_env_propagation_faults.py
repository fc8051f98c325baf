"""`probe env-propagation` under Ctrl-C, SIGTERM and a full disk behaves like every other command
(issue 29 §2): exit 130/143 or one line saying the disk is full, and nothing half-written.

Real processes and a real full disk: a tmpfs of a few pages (mounting one needs root, as CI runs;
elsewhere that test is skipped). One mechanism writes three one-page files (the parent's spec,
the driver's worker spec, the worker's result), so a tmpfs of one or two pages fills in the
driver or in the worker, the children whose tracebacks used to land in the table.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

CLI = [sys.executable, "-m", "ncclprobe", "probe", "env-propagation"]
BOUND_S = 60


def _leftover_processes(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def _wait_for_specs(parent: Path, count: int, deadline: float) -> None:
    """Until the hidden directory being filled beside --output holds `count` mechanisms' specs."""
    while time.monotonic() < deadline:
        specs = [p for d in parent.glob(".out.*.tmp") for p in d.glob("*.spec.json")]
        if len(specs) >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"{count} spec(s) never appeared")


@pytest.mark.parametrize("sig, code, specs", [(signal.SIGINT, 130, 1), (signal.SIGTERM, 143, 3)])
def test_an_interrupt_leaves_no_file_and_no_process(tmp_path, sig, code, specs):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*CLI, "--output", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for_specs(tmp_path, specs, time.monotonic() + BOUND_S)  # a driver is running
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1].startswith("ncclprobe: ") and "Traceback" not in err
    time.sleep(0.3)  # a driver that outlived its parent would write here now
    assert list(tmp_path.iterdir()) == []
    left = _leftover_processes(str(tmp_path))
    assert left == [], [(p.cmdline(), p.status()) for p in left]


@pytest.fixture
def tiny_disk(tmp_path):
    """A mount point whose tmpfs is mounted by the test (pages=1 or 2) and always unmounted."""
    mounted = []

    def mount(pages: int) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={4 * pages}k", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)


# (mechanism, pages of its tmpfs): with 1 the driver's write fails, with 2 the worker's (a plain
# subprocess, a multiprocessing child, a pool worker whose exception travels back to its driver)
FULL_DISKS = [("subprocess-env", 1), ("subprocess-env", 2), ("fork", 2), ("pool-after-start", 2)]


def test_a_full_disk_is_one_line_and_leaves_nothing(tiny_disk):
    """Every case at once (each mostly starts interpreters): --output on a full tmpfs, and the
    temporary directory (TMPDIR) on one, where the owner stamp and the spec fit and the driver's
    write does not."""
    runs = []
    for mechanism, pages in FULL_DISKS:
        disk = tiny_disk(pages)
        runs.append((disk, _start([*CLI, "--mechanism", mechanism, "--output", str(disk / "out")])))
    temp_disk = tiny_disk(2)
    temp_run = _start([*CLI, "--mechanism", "spawn"], TMPDIR=str(temp_disk))
    for disk, proc in runs:
        out, err = proc.communicate(timeout=BOUND_S)
        lines = [line for line in err.splitlines() if not line.startswith("env-propagation:")]
        assert proc.returncode == 2 and lines == [
            f"ncclprobe: error: cannot write --output '{disk / 'out'}': the disk is full; "
            "nothing was changed"
        ], err
        assert out == "" and list(disk.iterdir()) == []
    out, err = temp_run.communicate(timeout=BOUND_S)
    assert temp_run.returncode == 2, err
    assert (
        err.strip().endswith(": the disk is full; nothing was changed") and "Traceback" not in err
    )
    assert "the working directory" in err and list(temp_disk.iterdir()) == []


def _start(argv: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
