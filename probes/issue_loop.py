"""A batch of ready C calls issued by 100 bytes of x86-64 machine code instead of a Python loop.

Why: the raw path (`sweep --path nccl`) exists to time what nccl-tests times, NCCL called back to
back from compiled code. Through ctypes every call costs the host about 0.6 µs on the H200 machine
(1.3 µs on a loaded 2-core CPU machine), which at one rank, where NCCL's own host work is 4-5 µs
per call and 0.25 µs in place, is the whole difference from nccl-tests (docs/LOG.md 2026-12-06).
A compiled loop removes it, and this one needs no compiler on the user's machine: the loop below
was assembled once (GNU as, `as --64`) and its bytes are `X86_64`; `tests/test_issue_loop.py`
reassembles the listing where `as` exists and checks the bytes, and checks its behaviour through
ctypes callbacks on every machine.

    int64_t loop(uint64_t *records, int64_t n)

`records` holds n records of `WORDS` 64-bit words: the function's address, its 8 arguments (the
unused ones are ignored by the callee: the System V ABI passes 6 in registers, 2 on the stack, and
the caller pops them) and a result word. The loop calls each in order and stops at the first that
returns a non-zero int, storing that int (sign-extended) in the record's result word; it returns
the number of calls that returned 0. Stack: three pushes and 16 bytes for the stack arguments keep
rsp 16-byte aligned at each call. The listing (Intel syntax):

    push rbx; push r12; push r13; sub rsp, 16
    mov rbx, rdi; mov r12, rsi; xor r13d, r13d
  next:
    cmp r13, r12; jge done
    mov rax, [rbx+56]; mov [rsp], rax; mov rax, [rbx+64]; mov [rsp+8], rax
    mov rdi, [rbx+8]; mov rsi, [rbx+16]; mov rdx, [rbx+24]; mov rcx, [rbx+32]
    mov r8, [rbx+40]; mov r9, [rbx+48]; xor eax, eax
    call qword ptr [rbx]
    test eax, eax; jnz fail
    add rbx, 80; inc r13; jmp next
  fail:
    cdqe; mov [rbx+72], rax
  done:
    mov rax, r13; add rsp, 16; pop r13; pop r12; pop rbx; ret

The page is written, then made read-and-execute (never writable and executable at once). Where
that is refused (SELinux's execmem, another architecture, `NCCLPROBE_ISSUE_LOOP=ctypes`), `load()`
says why and the caller keeps its ctypes loop.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import sys

from ncclprobe import envvars

X86_64 = bytes.fromhex(
    "53415441554883ec104889fb4989f44531ed4d39e57d40488b433848890424488b4340488944"
    "2408488b7b08488b7310488b5318488b4b204c8b43284c8b4b3031c0ff1385c075094883c350"
    "49ffc5ebc14898488943484c89e84883c410415d415c5bc3"
)
WORDS = 10  # function, 8 arguments, result
MAX_ARGS = 8
CTYPES = "ctypes"  # NCCLPROBE_ISSUE_LOOP's value that keeps the Python loop
COMPILED = "a compiled loop (x86-64 machine code, probes/issue_loop.py)"
PYTHON = "a Python loop of ctypes calls, which adds its own host time to each call"
_MASK = (1 << 64) - 1
_loaded: dict[str, object] = {}


class Loop:
    """The loaded machine code: `run(records, n)` -> calls that returned 0."""

    def __init__(self, address: int):
        self.run = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)(address)


def load() -> tuple[Loop | None, str]:
    """(the loop, its name) or (None, why not); the page is mapped once per process."""
    if envvars.get(envvars.ISSUE_LOOP) == CTYPES:
        return None, f"{envvars.ISSUE_LOOP}={CTYPES}"
    if "loop" not in _loaded:
        _loaded["loop"] = _map()
    return _loaded["loop"]


def _map() -> tuple[Loop | None, str]:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None, f"no machine-code loop for {sys.platform}/{platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    mmap_fn, mprotect = libc.mmap, libc.mprotect
    mmap_fn.restype = ctypes.c_void_p
    mmap_fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    mmap_fn.argtypes += [ctypes.c_int, ctypes.c_long]
    mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    size = mmap.PAGESIZE
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    address = mmap_fn(None, size, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        return None, f"mmap refused a page: errno {ctypes.get_errno()}"
    ctypes.memmove(address, X86_64, len(X86_64))
    if mprotect(address, size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        return None, f"mprotect refused an executable page: errno {ctypes.get_errno()}"
    return Loop(address), COMPILED


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
    if isinstance(fn, ctypes._CFuncPtr):
        return ctypes.cast(fn, ctypes.c_void_p).value
    return None


def pack(calls) -> ctypes.Array | None:
    """`calls` (name, fn, args) as the loop's records, or None where one cannot go through it
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
    """The non-zero int the call at `index` returned (stored by the loop)."""
    return ctypes.c_int64(records[index * WORDS + WORDS - 1]).value
