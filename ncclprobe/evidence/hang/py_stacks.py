"""Python's own stack dump of every thread (`faulthandler.dump_traceback(all_threads=True)`), as
`ncclprobe capture`'s in-job module writes it per process at a dump (`stacks/rank<R>.<host>.<pid>.txt`;
py-spy's and Python's fatal-error dumps use the same lines).

The format (CPython's faulthandler.c): one block per thread, `Current thread 0x... (most recent call
first):` for the thread that dumped and `Thread 0x... (most recent call first):` for the others, then
one `  File "PATH", line N in NAME` per frame, innermost first. The main thread is the one whose
outermost frame is a `<module>`: faulthandler does not name it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ncclprobe.evidence.text import read_text_file

_THREAD = re.compile(
    r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[[^\]]*\])? \(most recent call first\):$"
)
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)$')
_RANK = re.compile(r"^rank(\d+)\.")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    name: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line} in {self.name}"


@dataclass(frozen=True)
class Thread:
    ident: str
    current: bool  # the thread that wrote the dump (the capture's watcher)
    frames: tuple[Frame, ...]  # innermost first

    @property
    def main(self) -> bool:
        return bool(self.frames) and self.frames[-1].name == "<module>"


@dataclass(frozen=True)
class Stacks:
    path: str
    rank: int | None
    threads: tuple[Thread, ...]

    def main_thread(self) -> Thread | None:
        return next((t for t in self.threads if t.main and not t.current), None)


def read_stacks(path: str | Path) -> Stacks:
    text = read_text_file(path, "Python stack dump")
    threads: list = []
    ident, current = None, False
    frames: list = []
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            if ident is not None:
                threads.append(Thread(ident, current, tuple(frames)))
            ident, current, frames = head.group(2), head.group(1) == "Current thread", []
            continue
        frame = _FRAME.match(line)
        if frame and ident is not None:
            frames.append(Frame(frame["file"], int(frame["line"]), frame["name"]))
    if ident is not None:
        threads.append(Thread(ident, current, tuple(frames)))
    rank = _RANK.match(Path(path).name)
    return Stacks(str(path), int(rank.group(1)) if rank else None, tuple(threads))


def user_frame(thread: Thread) -> Frame | None:
    """The innermost frame outside the standard library and site-packages: the job's own line."""
    for frame in thread.frames:
        if (
            "site-packages" not in frame.file
            and "/lib/python" not in frame.file
            and not (frame.file.startswith("<"))
        ):
            return frame
    return thread.frames[0] if thread.frames else None
