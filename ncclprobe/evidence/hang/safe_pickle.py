"""Reading a user's pickle without running it: the only way ncclprobe opens one.

A pickle is a program: its GLOBAL/STACK_GLOBAL/INST opcodes import any callable (`os.system`,
`subprocess.Popen`, `builtins.eval`), REDUCE/NEWOBJ/OBJ call it, BUILD calls `__setstate__`, EXT
codes fetch a registered class and PERSID hands an id to a hook. `pickle.load` on a file from
someone else's job therefore runs their code. PyTorch's Flight Recorder writes plain data (dicts,
lists, tuples, strings, numbers, booleans, None: the opcodes below, checked on real dumps), so
`loads_data`:

  1. walks the opcode stream with `pickletools.genops`, which decodes opcodes and never executes
     one, and refuses the first opcode outside `DATA_OPCODES` by name and offset;
  2. only then unpickles, with an Unpickler whose `find_class` and `persistent_load` refuse
     (a second lock: the walk already refused every opcode that reaches them);
  3. checks the result's shape without recursion: at most `max_depth` nested containers and
     `max_nodes` items counted as a tree, so a small pickle that reuses one list a million times
     through its memo (a "billion laughs") or refers to itself is refused, in time linear in
     the pickle's size, before any reader walks it.

Every refusal is a UsageProblem (exit 2) naming the file, in one line.
"""

from __future__ import annotations

import io
import pickle
import pickletools

from ncclprobe.errors import UsageProblem

# Opcodes that build only None, booleans, numbers, strings, bytes, lists, tuples, dicts and sets,
# in every protocol (0-5), plus framing and the memo. Real Flight Recorder dumps (torch 2.13,
# protocol 2) use PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS, TUPLE2, BINUNICODE,
# BININT/BININT1/BININT2, LONG1, NONE, NEWTRUE/NEWFALSE, BINPUT/BINGET and STOP.
DATA_OPCODES = frozenset(
    {
        "PROTO",
        "FRAME",
        "STOP",
        "MARK",
        "POP",
        "POP_MARK",
        "DUP",
        "NONE",
        "NEWTRUE",
        "NEWFALSE",
        "INT",
        "BININT",
        "BININT1",
        "BININT2",
        "LONG",
        "LONG1",
        "LONG4",
        "FLOAT",
        "BINFLOAT",
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
        "UNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE",
        "BINUNICODE8",
        "BINBYTES",
        "SHORT_BINBYTES",
        "BINBYTES8",
        "EMPTY_LIST",
        "APPEND",
        "APPENDS",
        "LIST",
        "EMPTY_TUPLE",
        "TUPLE",
        "TUPLE1",
        "TUPLE2",
        "TUPLE3",
        "EMPTY_DICT",
        "DICT",
        "SETITEM",
        "SETITEMS",
        "EMPTY_SET",
        "ADDITEMS",
        "FROZENSET",
        "PUT",
        "BINPUT",
        "LONG_BINPUT",
        "MEMOIZE",
        "GET",
        "BINGET",
        "LONG_BINGET",
    }
)
MAX_DEPTH = 32  # a dump nests 5 deep (dump > entries > entry > frames > frame)
MAX_NODES = 20_000_000  # items of the whole tree: 20,000 entries with 60 frames each fit
_CONTAINERS = (dict, list, tuple, set, frozenset)


def loads_data(data: bytes, label: str, *, max_depth=MAX_DEPTH, max_nodes=MAX_NODES) -> object:
    """The plain data a pickle holds, or a UsageProblem naming `label` (a file) and why."""
    _refuse_code(data, label)
    try:
        value = _DataOnly(io.BytesIO(data)).load()
    except UsageProblem:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError) as exc:
        raise UsageProblem(f"{label} is not a readable pickle: {exc}") from None
    except RecursionError:
        raise UsageProblem(f"{label}: pickle nested too deeply") from None
    _check_shape(value, label, max_depth, max_nodes)
    return value


def _refuse_code(data: bytes, label: str) -> None:
    """Decode every opcode (nothing runs) and refuse the first that could run or import code."""
    try:
        for opcode, _arg, offset in pickletools.genops(data):
            if opcode.name not in DATA_OPCODES:
                raise UsageProblem(
                    f"{label} is refused: pickle opcode {opcode.name} at byte {offset} can run code; "
                    "ncclprobe reads only pickles of plain data (dicts, lists, strings, numbers)"
                )
    except UsageProblem:
        raise
    except (ValueError, EOFError) as exc:
        raise UsageProblem(f"{label} is not a readable pickle: {exc}") from None


class _DataOnly(pickle.Unpickler):
    """No class is ever looked up and no persistent id resolved, whatever the opcodes say."""

    def find_class(self, module, name):
        raise UsageProblem(f"pickle refers to {module}.{name}: refused (plain data only)")

    def persistent_load(self, pid):
        raise UsageProblem("pickle refers to a persistent object: refused (plain data only)")


def _check_shape(value, label: str, max_depth: int, max_nodes: int) -> None:
    """Nesting depth and tree size (a shared sub-object counts every time it is reached), computed
    once per distinct container in post-order without recursion, so the time is linear in the
    pickle's size even when its tree is astronomically large; a container that holds itself is
    refused (no dump does that)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    active: set[int] = set()
    stack = [(value, False)]
    while stack:
        item, finished = stack.pop()
        if not isinstance(item, _CONTAINERS):
            continue
        key = id(item)
        kids = _children(item)
        if finished:
            active.discard(key)
            size[key] = 1 + sum(size.get(id(k), 1) for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids if id(k) in depth), default=0)
            if size[key] > max_nodes:
                raise UsageProblem(f"{label}: more than {max_nodes:,} items (limit): refused")
            if depth[key] > max_depth:
                raise UsageProblem(f"{label}: containers nested deeper than {max_depth}: refused")
            continue
        if key in size:
            continue
        if key in active:
            raise UsageProblem(f"{label}: a container holds itself: refused")
        active.add(key)
        stack.append((item, True))
        stack.extend((k, False) for k in kids if isinstance(k, _CONTAINERS) and id(k) not in size)


def _children(item) -> list:
    return [x for pair in item.items() for x in pair] if isinstance(item, dict) else list(item)
