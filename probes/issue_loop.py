"""What issues the raw path's prepared C calls: a loop in C where it was built, else a ctypes loop.

Why: the raw path (`sweep --path nccl`) exists to time what nccl-tests times, NCCL called back to
back from compiled code. Through a Python loop of ctypes calls every call costs the host about
0.6 µs more on the GPU machines, which at one rank, where NCCL's own host work is 4-5 µs per call
and 0.25 µs in place, is the whole difference from nccl-tests (docs/LOG.md 2026-12-06). The C
loop (`probes/_issue_loop.c`, an optional extension that setup.py builds where a compiler exists)
makes the whole batch in one call, the GIL released.

Both loops keep one contract: the calls are made in order, and the first that returns non-zero
stops the batch and is handed, with its result, to `fail(name, result)`, which raises the call's
own error text. What issued a batch is `C_LOOP` or `CTYPES` (a row's `issued_by`), and for the
ctypes loop why the C loop did not (`Issuer.why`).

`NCCLPROBE_ISSUE_LOOP` picks (`ncclprobe.envvars.ISSUE_LOOP_CHOICES`, any case; unset or empty
is `auto`): `auto` the C loop where it is built, else ctypes; `c` the C loop, refused where it is
not built; `ctypes` the Python loop. Any other value is refused (`check`, before a sweep starts).
"""

from __future__ import annotations

import ctypes
from _ctypes import CFuncPtr
from collections.abc import Callable
from types import ModuleType
from typing import NamedTuple, NoReturn

from ncclprobe import envvars
from ncclprobe.errors import Unsupported, UsageProblem

AUTO, C, CTYPES_CHOICE = envvars.ISSUE_LOOP_CHOICES
C_LOOP = "c-loop"  # issued_by: the C loop (probes/_issue_loop.c)
CTYPES = "ctypes"  # issued_by: a Python loop of ctypes calls
WORDS = 10  # a record: the function, its 8 argument words, the result word
MAX_ARGS = 8
_MASK = (1 << 64) - 1


class Issuer(NamedTuple):
    """A prepared batch: `run()` issues it; `issued_by` is C_LOOP or CTYPES, `why` says why the
    C loop did not issue it (empty when it did)."""

    run: Callable[[], None]
    issued_by: str
    why: str = ""


def choice(environ=None) -> str:
    """NCCLPROBE_ISSUE_LOOP as one of its choices; anything else is the user's mistake."""
    raw = envvars.get(envvars.ISSUE_LOOP, environ, default="")
    picked = raw.strip().lower() or AUTO
    if picked not in envvars.ISSUE_LOOP_CHOICES:
        raise UsageProblem(
            f"{envvars.ISSUE_LOOP}={raw!r} is not known: use {AUTO}, {C} or {CTYPES_CHOICE} "
            f"(any case; unset: {AUTO})"
        )
    return picked


def check(environ=None) -> None:
    """A command's first check, before anything heavy: an unknown value is refused (exit 2), and
    `c` where the C loop is not built here (exit 3)."""
    load(environ)


def load(environ=None) -> tuple[ModuleType | None, str]:
    """(the C loop's module, "") or (None, why the ctypes loop issues instead)."""
    picked = choice(environ)
    if picked == CTYPES_CHOICE:
        return None, f"{envvars.ISSUE_LOOP}={CTYPES_CHOICE}"
    try:
        from ncclprobe.probes import _issue_loop
    except ImportError as exc:
        why = f"the C loop is not built in this install ({exc})"
        if picked == C:
            raise Unsupported(
                f"{envvars.ISSUE_LOOP}={C}: {why}; reinstall ncclprobe where a C compiler and "
                f"Python's headers exist, or set {envvars.ISSUE_LOOP}={AUTO}"
            ) from None
        return None, why
    return _issue_loop, ""


def batch(calls, fail: Callable[[str, int], NoReturn]) -> Issuer:
    """`calls` (name, fn, args) ready to issue: through the C loop where it loads and can make
    every call, else through `python_loop`."""
    loop, why = load()
    records = pack(calls) if loop is not None else None
    if loop is None or records is None:
        why = why or "a call the C loop cannot make (a Python callable, or over 8 arguments)"
        return Issuer(lambda: python_loop(calls, fail), CTYPES, why)
    names, count = [call[0] for call in calls], len(calls)

    def run() -> None:
        done = loop.run(records, count)
        if done != count:
            fail(names[done], result_of(records, done))

    return Issuer(run, C_LOOP)


def python_loop(calls, fail: Callable[[str, int], NoReturn]) -> None:
    """The fallback: one ctypes call and one test of its result per call."""
    for name, fn, args in calls:
        result = fn(*args)
        if result:
            fail(name, result)
            return


def word(arg) -> int:
    """A ready ctypes argument (c_void_p, c_size_t, c_int ...) as the 64-bit word a register
    holds: a negative int as its two's complement (the callee reads the low 32 bits)."""
    value = arg.value if isinstance(arg, ctypes._SimpleCData) else arg
    if value is None:
        return 0
    if not isinstance(value, int):
        raise TypeError(f"not an integer argument: {arg!r}")
    return value & _MASK


def address_of(fn) -> int | None:
    """A ctypes foreign function's entry point, or None for anything else (a Python callable)."""
    if isinstance(fn, CFuncPtr):
        return ctypes.cast(fn, ctypes.c_void_p).value
    return None


def pack(calls) -> ctypes.Array | None:
    """`calls` (name, fn, args) as the C loop's records, or None where one cannot go through it
    (a Python callable, more than 8 arguments)."""
    records = (ctypes.c_uint64 * (WORDS * len(calls)))()
    for i, (_, fn, args) in enumerate(calls):
        entry = address_of(fn)
        if entry is None or len(args) > MAX_ARGS:
            return None
        base = i * WORDS
        records[base] = entry
        for j, arg in enumerate(args):
            records[base + 1 + j] = word(arg)
    return records


def result_of(records, index: int) -> int:
    """The non-zero int the call at `index` returned (stored by the C loop)."""
    return ctypes.c_int64(records[index * WORDS + WORDS - 1]).value
