"""Temporary directories that a killed ncclprobe does not leave behind for long.

A pool's run directory (`ncclprobe-pool-*`), the sweep's NCCL logs and the engine's logs live in
the system's temporary directory while a command runs, and are removed in `finally`. SIGINT and
SIGTERM unwind through those (`ncclprobe.interrupts`), but SIGKILL or a power cut does not. So
each directory records its owner (pid and process start time, which a recycled pid does not
share), and every new one first removes the directories of owners that are gone: the debris of
a killed run lasts until the next run, never longer.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ncclprobe import interrupts

log = logging.getLogger("ncclprobe.tempdirs")

OWNER = ".owner"
PREFIXES = (
    "ncclprobe-pool-",
    "ncclprobe-sweep-",
    "ncclprobe-engine-nccl-",
    "ncclprobe-envprop-",
    "ncclprobe-graph-capture-",
    "ncclprobe-tuned-",
    "ncclprobe-dump-",
)


def make(prefix: str) -> Path:
    """A new directory `prefix*` in the temporary directory, stamped with this process as owner,
    after removing those whose owner died. The caller removes it (or use `owned`).

    A Ctrl-C is held from the directory's creation to its stamp: `mkdtemp` returns through Python
    calls after its mkdir, where a pending SIGINT raised and left an unstamped directory, which no
    run reaps (tests/test_tempdirs_interrupt.py); held, it raises here, where the directory goes."""
    reap_stale()
    path = None
    try:
        with interrupts.held():
            path = Path(tempfile.mkdtemp(prefix=prefix))
            (path / OWNER).write_text(_stamp(os.getpid()) or str(os.getpid()), encoding="utf-8")
    except BaseException:  # an interrupt or an error: no unstamped directory stays behind
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        raise
    return path


@contextmanager
def owned(prefix: str) -> Iterator[Path]:
    """`make`, removed on the way out whatever happens."""
    path = make(prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def reap_stale(root: str | Path | None = None) -> list[Path]:
    """Remove ncclprobe's temporary directories whose owner process is gone; return them."""
    root = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(PREFIXES)]
    except OSError:
        return removed
    for path in candidates:
        if _owner_gone(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        log.info(
            "removed %d temporary director%s left by killed runs",
            len(removed),
            "y" if len(removed) == 1 else "ies",
        )
    return removed


def _owner_gone(path: Path) -> bool:
    try:
        if path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
            return False  # only our own directories, never through a link
        stamp = (path / OWNER).read_text(encoding="utf-8").strip()
    except OSError:
        return False  # unstamped (being created, or not ours to judge): leave it
    pid_text, _, started = stamp.partition(" ")
    if not pid_text.isascii() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    current = _stamp(pid)
    if current is None:
        return True
    _, _, now_started = current.partition(" ")
    return bool(started and now_started) and now_started != started  # the pid was recycled


def _stamp(pid: int) -> str | None:
    """`"<pid> <start time>"` of a live process, None when there is none."""
    try:
        import psutil

        return f"{pid} {psutil.Process(pid).create_time():.3f}"
    except Exception:  # no such process, or psutil cannot tell: treat as gone only if it is absent
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return str(pid)
        return str(pid)
