"""Reading a user's pickle without running it: the only way ncclprobe opens one.

A pickle is a program: its GLOBAL/STACK_GLOBAL/INST opcodes import any callable (`os.system`,
`subprocess.Popen`, `builtins.eval`), REDUCE/NEWOBJ/OBJ call it, BUILD calls `__setstate__`, EXT
codes fetch a registered class and PERSID hands an id to a hook. `pickle.load` on a file from
someone else's job therefore runs their code. PyTorch's Flight Recorder writes plain data (dicts,
lists, tuples, strings, numbers, booleans, None), so `loads_data` uses Python's documented way to
load such pickles, at C speed: an Unpickler whose `find_class` and `persistent_load` refuse
everything. A callable can enter a pickle only through those two hooks or an EXT code, and EXT
codes also go through `find_class` unless copyreg's extension cache already holds them, so the
cache is emptied first (it is only a cache; nothing here registers extensions). Without a callable,
REDUCE, NEWOBJ, OBJ, INST and BUILD have nothing to call and fail: no code from the file can run.

What the C unpickler can cost, and how each cost is bounded BEFORE the work grows:
- bytes: the caller caps the file and its decompressed size while streaming (`gunzip_capped`:
  an absolute cap and a compression-ratio cap), so the opcode stream is at most D bytes;
- objects: every new object needs an opcode of at least one byte, so at most D are made. Their
  memory is not proportional to D alone: an empty set is 216 bytes from one opcode byte, and one
  LONG_BINPUT (5 bytes) with index 2**26 makes the C unpickler grow its memo table to 2**27
  pointers (1 GB, zero-filled; measured: 7 bytes, 4.6 s, 1 GB). No byte cap bounds that, and
  finding those opcodes needs the pure-Python opcode walk that made reading slow, so the reading
  runs in a worker whose address space is capped (`ncclprobe.evidence.read_pool`): past the
  budget the allocation fails with MemoryError and the file is refused;
- time: the C unpickler is linear in D, except where it hashes: a dict key or set item that is a
  tuple is hashed afresh, recursively (a tuple of tuples shared through the memo hashes 2**depth
  times). The worker's CPU time is capped per file: such a pickle is stopped and refused;
- walking the result: a list shared through the memo is one object however often it is referred
  to, but a walk visits it every time (a "billion laughs"). `Budget` counts every item a reader
  visits and refuses the file once it visits more than its size allows; readers walk only the
  fields they know, so nesting deeper than their schema is never walked.

Every refusal is a UsageProblem (exit 2) naming the file, in one line.
"""

from __future__ import annotations

import copyreg
import gc
import io
import pickle
import pickletools
from typing import NoReturn

from ncclprobe.errors import UsageProblem

# Opcodes that build only None, booleans, numbers, strings, bytes, lists, tuples, dicts and sets,
# in every protocol (0-5), plus framing and the memo. Real Flight Recorder dumps (torch 2.13,
# protocol 2) use PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS, TUPLE2, BINUNICODE,
# BININT/BININT1/BININT2, LONG1, NONE, NEWTRUE/NEWFALSE, BINPUT/BINGET and STOP. Used only to
# name the opcode of a pickle already refused (`_locate_code`), never to admit one.
DATA_OPCODES = frozenset(
    "PROTO FRAME STOP MARK POP POP_MARK DUP NONE NEWTRUE NEWFALSE INT BININT BININT1 BININT2 LONG "
    "LONG1 LONG4 FLOAT BINFLOAT STRING BINSTRING SHORT_BINSTRING UNICODE SHORT_BINUNICODE "
    "BINUNICODE BINUNICODE8 BINBYTES SHORT_BINBYTES BINBYTES8 EMPTY_LIST APPEND APPENDS LIST "
    "EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_DICT DICT SETITEM SETITEMS EMPTY_SET ADDITEMS "
    "FROZENSET PUT BINPUT LONG_BINPUT MEMOIZE GET BINGET LONG_BINGET".split()
)
LOCATE_OPCODES = 2_000_000  # a refused pickle's offending opcode is looked for this far (~2 s)


class Refused(UsageProblem):
    """The pickle asked for code (a class, a callable, a persistent object)."""


def loads_data(data: bytes, label: str) -> object:
    """The plain data a pickle holds, or a UsageProblem naming `label` (a file) and why. Run it
    where memory and CPU time are capped (`read_pool`): see the module docstring."""
    # EXT codes then reach find_class, which refuses (typeshed leaves the private cache out)
    copyreg._extension_cache.clear()  # type: ignore[attr-defined]
    # A buffered reader lets the C unpickler read ahead (plain BytesIO costs a Python call per
    # opcode: 3x slower); the collector is held while the load builds its containers, none cyclic
    # in a dump, and the worker's memory cap bounds the rest.
    source = io.BufferedReader(io.BytesIO(data), buffer_size=1 << 20)
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _DataOnly(source).load()
    except Refused as exc:
        raise UsageProblem(f"{label} is refused: {_locate_code(data) or exc}") from None
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - any other failure of the C unpickler: unreadable
        found = _locate_code(data)
        if found:
            raise UsageProblem(f"{label} is refused: {found}") from None
        raise UsageProblem(f"{label} is not a readable pickle: {_short(exc)}") from None
    finally:
        if collecting:
            gc.enable()


def _short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


class _DataOnly(pickle.Unpickler):
    """No class is ever looked up and no persistent id resolved, whatever the opcodes say."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise Refused(
            f"pickle refers to {str(module)[:80]}.{str(name)[:80]}: refused (plain data only)"
        )

    def persistent_load(self, pid: object) -> NoReturn:
        raise Refused("pickle refers to a persistent object: refused (plain data only)")


def _locate_code(data: bytes) -> str | None:
    """Only for a pickle already refused: the first opcode that could run or import code, by name
    and byte offset (`pickletools.genops` decodes and runs nothing), looked for in the first
    `LOCATE_OPCODES` opcodes."""
    try:
        for count, (opcode, _arg, offset) in enumerate(pickletools.genops(data)):
            if opcode.name not in DATA_OPCODES:
                return (
                    f"pickle opcode {opcode.name} at byte {offset} can run code; ncclprobe reads "
                    "only pickles of plain data (dicts, lists, strings, numbers)"
                )
            if count >= LOCATE_OPCODES:
                return None
    except Exception:  # noqa: BLE001 - a malformed stream: nothing more to say
        return None
    return None


class Budget:
    """Items a reader may visit in one loaded pickle: a file of N bytes holds at most N objects,
    so a walk that visits more has met the same object again and again through the memo (a
    "billion laughs"). `spend(n)` before walking n items; past the budget the file is refused."""

    def __init__(self, label: str, items: int):
        self.label, self.left, self.items = label, items, items

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise UsageProblem(
                f"{self.label}: refers to more than {self.items:,} items (its objects are "
                "shared by reference to look larger than the file): refused"
            )
