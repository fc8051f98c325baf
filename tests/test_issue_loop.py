"""The raw path's compiled issue loop (probes/issue_loop.py): its bytes are its listing, and it
calls what it is given, with every argument, in order, and stops where a call fails.

The calls go to ctypes callbacks (real C entry points that land in Python) and to libc, so this
runs on any x86-64 Linux machine, CPU only. Elsewhere the loop does not load and these skip.
"""

from __future__ import annotations

import ctypes
import platform
import re
import shutil
import subprocess
import sys

import pytest

from ncclprobe import envvars
from ncclprobe.probes import issue_loop
from ncclprobe.probes.nccl_ctypes import Call, Communicator, NcclError

X86_LINUX = sys.platform == "linux" and platform.machine() == "x86_64"
needs_loop = pytest.mark.skipif(not X86_LINUX, reason="the compiled loop is x86-64 Linux only")
EIGHT = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_uint64] * 8)
LIBC = ctypes.CDLL(None)


@pytest.fixture
def loop():
    """A freshly mapped loop for each test (load() maps one per process)."""
    found, why = issue_loop._map()
    assert found is not None, why
    return found


def _recorder(seen: list, fail_on: int | None = None, result: int = -7):
    """A C entry point that records its 8 arguments and returns `result` when the first is
    `fail_on`, else 0 (kept alive by the caller)."""

    def record(*args):
        seen.append(args)
        return result if args[0] == fail_on else 0

    return EIGHT(record)


def _records(rows: list[tuple[int, list[int]]]):
    out = (ctypes.c_uint64 * (issue_loop.WORDS * len(rows)))()
    for i, (fn, args) in enumerate(rows):
        out[i * issue_loop.WORDS] = fn
        for j, value in enumerate(args):
            out[i * issue_loop.WORDS + 1 + j] = value
    return out


def _address(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value


def test_the_bytes_are_the_listing_in_the_docstring(tmp_path):
    if not (shutil.which("as") and shutil.which("objcopy")) or not X86_LINUX:
        pytest.skip("needs GNU as and objcopy on x86-64")
    doc = issue_loop.__doc__
    listing = doc[doc.index("(Intel syntax):") + len("(Intel syntax):") : doc.index("The page is")]
    source = ".intel_syntax noprefix\n.text\n" + re.sub(r"\n\s*", "\n", listing.strip()) + "\n"
    (tmp_path / "loop.s").write_text(source)
    subprocess.run(["as", "--64", "-o", "loop.o", "loop.s"], cwd=tmp_path, check=True)
    subprocess.run(
        ["objcopy", "-O", "binary", "-j", ".text", "loop.o", "loop.bin"], cwd=tmp_path, check=True
    )
    assert (tmp_path / "loop.bin").read_bytes() == issue_loop.X86_64


@needs_loop
def test_every_argument_reaches_every_call_in_order(loop):
    seen: list = []
    entry = _recorder(seen)
    rows = [(_address(entry), [(i << 40) + (j << 8) + 0xAB for j in range(8)]) for i in range(3)]
    rows.append((_address(entry), [2**64 - 1, 2**63, 1, 0, 2**32, 2**32 - 1, 7, 2**64 - 2]))
    records = _records(rows)
    assert loop.run(ctypes.addressof(records), len(rows)) == len(rows)
    assert [list(args) for args in seen] == [args for _, args in rows]


@needs_loop
def test_the_first_failing_call_stops_the_batch_and_leaves_its_result(loop):
    seen: list = []
    entry = _recorder(seen, fail_on=2, result=-7)
    rows = [(_address(entry), [k, 0, 0, 0, 0, 0, 0, 0]) for k in range(5)]
    records = _records(rows)
    assert loop.run(ctypes.addressof(records), 5) == 2
    assert [args[0] for args in seen] == [0, 1, 2]  # nothing after the failure
    assert issue_loop.result_of(records, 2) == -7
    assert records[1 * issue_loop.WORDS + issue_loop.WORDS - 1] == 0  # a success stores nothing


@needs_loop
def test_a_positive_failure_is_kept_as_it_is(loop):
    seen: list = []
    entry = _recorder(seen, fail_on=0, result=5)  # ncclInvalidUsage
    records = _records([(_address(entry), [0] * 8)])
    assert loop.run(ctypes.addressof(records), 1) == 0
    assert issue_loop.result_of(records, 0) == 5


@needs_loop
def test_an_empty_batch_calls_nothing(loop):
    seen: list = []
    entry = _recorder(seen)
    records = _records([(_address(entry), [1] * 8)])
    assert loop.run(ctypes.addressof(records), 0) == 0
    assert seen == []


@needs_loop
def test_a_c_function_with_fewer_arguments_and_many_calls(loop):
    labs = LIBC.labs
    count = 20_000  # far more calls than stack slots: the loop's stack does not grow
    records = _records([(_address(labs), [0])] * count)
    assert loop.run(ctypes.addressof(records), count) == count
    records = _records([(_address(labs), [0]), (_address(labs), [2**64 - 3])])  # labs(-3) = 3
    assert loop.run(ctypes.addressof(records), 2) == 1
    assert issue_loop.result_of(records, 1) == 3


def test_arguments_become_the_words_a_register_holds():
    assert issue_loop.word(ctypes.c_int(-1)) == 2**64 - 1
    assert issue_loop.word(ctypes.c_int(7)) == 7
    assert issue_loop.word(ctypes.c_void_p(None)) == 0
    assert issue_loop.word(ctypes.c_void_p(2**63 + 5)) == 2**63 + 5
    assert issue_loop.word(ctypes.c_size_t(2**40)) == 2**40
    with pytest.raises(TypeError):
        issue_loop.word(ctypes.c_double(1.0))


def test_only_c_functions_of_up_to_eight_arguments_are_packed():
    labs = LIBC.labs
    assert issue_loop.pack([Call("labs", labs, (ctypes.c_long(0),))]) is not None
    assert issue_loop.pack([Call("py", lambda: None, ())]) is None
    too_many = tuple(ctypes.c_int(0) for _ in range(issue_loop.MAX_ARGS + 1))
    assert issue_loop.pack([Call("labs", labs, too_many)]) is None
    assert issue_loop.pack([Call("labs", labs, too_many[:-1])]) is not None


def test_the_variable_keeps_the_python_loop(monkeypatch):
    monkeypatch.setenv(envvars.ISSUE_LOOP, issue_loop.CTYPES)
    found, why = issue_loop.load()
    assert found is None and why == f"{envvars.ISSUE_LOOP}={issue_loop.CTYPES}"


def _bare_communicator() -> Communicator:
    """A Communicator without NCCL (CPU): `batch` touches the library only for an NCCL call's
    failure, and these calls are libc's."""
    comm = Communicator.__new__(Communicator)
    comm.lib, comm.handle = None, ctypes.c_void_p()
    return comm


@pytest.mark.parametrize("forced", [False, True])
def test_a_batch_issues_through_the_loop_or_python_with_the_same_failure(monkeypatch, forced):
    if forced:
        monkeypatch.setenv(envvars.ISSUE_LOOP, issue_loop.CTYPES)
    else:
        monkeypatch.delenv(envvars.ISSUE_LOOP, raising=False)
    labs = LIBC.labs
    comm = _bare_communicator()
    run, issued_by = comm.batch([Call("labs", labs, (ctypes.c_long(0),))] * 3)
    run()
    compiled = X86_LINUX and not forced
    assert (issued_by == issue_loop.COMPILED) == compiled
    assert issued_by.startswith(issue_loop.PYTHON) != compiled
    calls = [Call("labs", labs, (ctypes.c_long(0),)), Call("labs", labs, (ctypes.c_long(-3),))]
    run, _ = comm.batch(calls)
    with pytest.raises(NcclError, match="^labs returned 3$"):
        run()


def test_a_python_call_in_the_batch_keeps_the_python_loop(monkeypatch):
    monkeypatch.delenv(envvars.ISSUE_LOOP, raising=False)
    seen = []
    comm = _bare_communicator()
    run, issued_by = comm.batch([Call("py", lambda: seen.append(1) or 0, ())])
    run()
    assert seen == [1] and issued_by.startswith(issue_loop.PYTHON)


@needs_loop
def test_the_loop_is_mapped_once_per_process(monkeypatch):
    monkeypatch.delenv(envvars.ISSUE_LOOP, raising=False)
    first, name = issue_loop.load()
    assert first is not None and name == issue_loop.COMPILED
    assert issue_loop.load()[0] is first


def test_another_machine_keeps_the_python_loop(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert issue_loop._map() == (None, f"no machine-code loop for {sys.platform}/aarch64")


@needs_loop
def test_a_refused_page_is_said_with_its_errno():
    """The address space capped at what the process already has: mmap fails with ENOMEM."""
    code = (
        "import resource, re\n"
        "from ncclprobe.probes import issue_loop\n"
        "size = int(re.search(r'VmSize:\\s+(\\d+)', open('/proc/self/status').read())[1]) * 1024\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size, size))\n"
        "print(issue_loop._map())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "(None, 'mmap refused a page: errno 12')", done.stderr[-500:]


def test_a_packed_record_holds_the_function_then_each_argument_in_order():
    labs = LIBC.labs
    args = (ctypes.c_long(0), ctypes.c_int(-1), ctypes.c_void_p(7), ctypes.c_size_t(2**40))
    records = issue_loop.pack([Call("a", labs, args), Call("b", labs, (ctypes.c_long(3),))])
    words = list(records)
    assert words[: issue_loop.WORDS] == [_address(labs), 0, 2**64 - 1, 7, 2**40, 0, 0, 0, 0, 0]
    assert words[issue_loop.WORDS :] == [_address(labs), 3, 0, 0, 0, 0, 0, 0, 0, 0]


def test_plain_integers_are_words_too_and_anything_else_is_refused_by_name():
    assert issue_loop.word(5) == 5 and issue_loop.word(-1) == 2**64 - 1
    with pytest.raises(TypeError, match=r"^not an integer argument: 'x'$"):
        issue_loop.word("x")
