"""Ctrl-C and SIGTERM: unwind like any error (every `finally` runs, half-written files go, worker
pools are killed), then exit 130 (SIGINT) or 143 (SIGTERM) with one line that says how to continue.

Python turns SIGINT into KeyboardInterrupt, but its default SIGTERM kills the process on the spot:
no cleanup, no word. `install()` makes SIGTERM raise `Terminated` (a KeyboardInterrupt) in the main
thread, so both signals take the same path. A command that can be continued says how, once it knows
(`set_hint("continue with: ncclprobe sweep --resume FILE")`); the CLI prints the hint after the
interruption, or "nothing was written" when no command set one.

Some code cannot unwind: the import of torch and numpy. An interrupt raised inside torch's C
initialisation (it imports numpy from C) is cleared there, so the sweep ran on and exited 0; one
raised inside numpy's extension module leaves it half-initialised, and the next import of numpy
fails ("cannot load module more than once per process": exit 4). That was the Ctrl-C lost at
sweep start-up (7 of 130 tries; reproduced here, the signal landing in numpy's import under
torch's). `install()` therefore holds SIGINT and SIGTERM while those two packages load and delivers
a held signal the moment the import is done: a Ctrl-C then waits for the import, never gets lost.
"""

from __future__ import annotations

import builtins
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

EXIT_SIGINT = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_SIGTERM = 143  # 128 + SIGTERM
NOTHING_LEFT = "no output file was left behind; run the command again to start over"

_hint = None  # str, or a callable giving the str when asked


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread was, so it unwinds exactly like Ctrl-C."""

    signum = signal.SIGTERM


HELD_IMPORTS = frozenset({"torch", "numpy"})  # packages whose import an interrupt must not cut
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_holding = False
_import = builtins.__import__


def install() -> None:
    """Route SIGTERM through `Terminated`, and hold both signals while torch or numpy is imported;
    a no-op outside the main thread (signals go there only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
        builtins.__import__ = _held_import


@contextmanager
def held() -> Iterator[None]:
    """Run the body with SIGINT and SIGTERM held, then deliver the first one that came, so its
    handler raises where the body ended. Signals the process ignores stay ignored; nested use and
    other threads hold nothing more."""
    global _holding
    if _holding or threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {}
    for sig in HELD_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, lambda signum, _frame: pending.append(signum))
    _holding = True
    try:
        yield
    finally:  # an import that failed must not take a held Ctrl-C with it
        _holding = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            signal.raise_signal(pending[0])  # its handler runs now: KeyboardInterrupt, Terminated


def _held_import(name, globals=None, locals=None, fromlist=(), level=0):
    """`import` itself, holding SIGINT and SIGTERM through the first import of torch or numpy. Held
    around the whole statement, not inside the loader, so a held signal raises after the package is
    in sys.modules: raised inside, it would make importlib drop the package after its C code had
    loaded, and the next import of it would fail again."""
    top = name.partition(".")[0]
    if level == 0 and top in HELD_IMPORTS and top not in sys.modules:
        with held():
            return _import(name, globals, locals, fromlist, level)
    return _import(name, globals, locals, fromlist, level)


def _raise_terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt the cleanup
    raise Terminated()


def set_hint(text) -> None:
    """How to continue after an interruption from here on: a sentence, a callable that returns one
    when asked (for counts that change), or None (nothing to continue)."""
    global _hint
    _hint = text


def hint() -> str | None:
    text = _hint() if callable(_hint) else _hint
    return text or None


def describe(exc: BaseException) -> tuple[str, int]:
    """(the one line, the exit code) for an interrupted command."""
    terminated = isinstance(exc, Terminated) or isinstance(exc.__cause__, Terminated)
    what = "terminated (SIGTERM)" if terminated else "interrupted (Ctrl-C)"
    return f"{what}; {hint() or NOTHING_LEFT}", EXIT_SIGTERM if terminated else EXIT_SIGINT
