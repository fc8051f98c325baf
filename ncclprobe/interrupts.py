"""Ctrl-C and SIGTERM: unwind like any error (every `finally` runs, half-written files go, worker
pools are killed), then exit 130 (SIGINT) or 143 (SIGTERM) with one line that says how to continue.

Python turns SIGINT into KeyboardInterrupt, but its default SIGTERM kills the process on the spot:
no cleanup, no word. `install()` makes SIGTERM raise `Terminated` (a KeyboardInterrupt) in the main
thread, so both signals take the same path. A command that can be continued says how, once it knows
(`set_hint("continue with: ncclprobe sweep --resume FILE")`); the CLI prints the hint after the
interruption, or "nothing was written" when no command set one.
"""

from __future__ import annotations

import signal
import threading

EXIT_SIGINT = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_SIGTERM = 143  # 128 + SIGTERM
NOTHING_LEFT = "no output file was left behind; run the command again to start over"

_hint = None  # str, or a callable giving the str when asked


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread was, so it unwinds exactly like Ctrl-C."""

    signum = signal.SIGTERM


def install() -> None:
    """Route SIGTERM through `Terminated`; a no-op outside the main thread (signals go there only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


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
