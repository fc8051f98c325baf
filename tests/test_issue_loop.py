"""The raw path's issue loops (probes/issue_loop.py, probes/_issue_loop.c): both make the calls
they are given, with every argument, in order, stop at the first that fails and hand over its
name and result; the C loop releases the GIL; without the extension the ctypes loop issues and
says why; NCCLPROBE_ISSUE_LOOP refuses what it does not know.

The calls go to ctypes callbacks (real C entry points that land in Python) and to libc, so this
runs on any machine, CPU only. The C loop's tests need the extension built (`pip install -e .`
builds it where a compiler exists, as CI's install does).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from ncclprobe import envvars
from ncclprobe.errors import UsageProblem
from ncclprobe.probes import issue_loop
from ncclprobe.probes.nccl_ctypes import Call, Communicator, NcclError

EIGHT = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_uint64] * 8)
LIBC = ctypes.CDLL(None)
LOOPS = [("c", issue_loop.C_LOOP), ("ctypes", issue_loop.CTYPES)]
HIDDEN = "import sys; sys.modules['ncclprobe.probes._issue_loop'] = None\n"


class Failed(Exception):
    pass


def _fail(name: str, result: int):
    raise Failed(name, result)


def _untyped(entry) -> ctypes._CFuncPtr:
    """A function pointer without argtypes at `entry`'s address, as `Library.untyped` gives for
    NCCL's functions: the ctypes loop passes each ready argument as its own type."""
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(entry, ctypes.c_void_p).value)
    fn.restype = ctypes.c_int
    return fn


def _recorder(seen: list, fail_on: int | None = None, result: int = -7):
    """(a C entry point that records its 8 arguments and returns `result` when the first is
    `fail_on`, else 0; the callback object, kept alive by the caller)."""

    def record(*args):
        seen.append(args)
        return result if args[0] == fail_on else 0

    callback = EIGHT(record)
    return _untyped(callback), callback


def _words(values) -> tuple:
    return tuple(ctypes.c_uint64(v) for v in values)


@pytest.fixture(params=LOOPS, ids=[name for name, _ in LOOPS])
def picked(request, monkeypatch):
    """Each loop in turn, chosen as a user chooses it: (NCCLPROBE_ISSUE_LOOP, issued_by)."""
    monkeypatch.setenv(envvars.ISSUE_LOOP, request.param[0])
    return request.param


def test_every_argument_reaches_every_call_in_order(picked):
    seen: list = []
    fn, _keep = _recorder(seen)
    rows = [[(i << 40) + (j << 8) + 0xAB for j in range(8)] for i in range(3)]
    rows.append([2**64 - 1, 2**63, 1, 0, 2**32, 2**32 - 1, 7, 2**64 - 2])
    issuer = issue_loop.batch([Call(f"call{i}", fn, _words(r)) for i, r in enumerate(rows)], _fail)
    assert (issuer.issued_by, issuer.why) == (
        picked[1],
        "" if picked[0] == "c" else "NCCLPROBE_ISSUE_LOOP=ctypes",
    )
    issuer.run()
    assert [list(args) for args in seen] == rows
    issuer.run()  # a prepared batch is issued once per trial: the same calls again
    assert [list(args) for args in seen] == rows + rows


@pytest.mark.parametrize("result", [-7, 5, 2**31 - 1, -(2**31)])
def test_the_first_failing_call_stops_the_batch_and_hands_over_its_name_and_result(picked, result):
    seen: list = []
    fn, _keep = _recorder(seen, fail_on=2, result=result)
    calls = [Call(f"call{k}", fn, _words([k] + [0] * 7)) for k in range(5)]
    issuer = issue_loop.batch(calls, _fail)
    with pytest.raises(Failed) as failed:
        issuer.run()
    assert failed.value.args == ("call2", result)
    assert [args[0] for args in seen] == [0, 1, 2]  # nothing after the failure


def test_a_failure_on_the_first_or_last_call_is_found_there(picked):
    seen: list = []
    fn, _keep = _recorder(seen, fail_on=1)
    for calls, expected in (([1, 0, 0], "call0"), ([0, 0, 1], "call2")):
        seen.clear()
        batch = [Call(f"call{i}", fn, _words([v] + [0] * 7)) for i, v in enumerate(calls)]
        with pytest.raises(Failed, match=expected):
            issue_loop.batch(batch, _fail).run()
        assert len(seen) == int(expected[-1]) + 1


def test_an_empty_batch_calls_nothing(picked):
    issuer = issue_loop.batch([], _fail)
    issuer.run()
    assert issuer.issued_by == picked[1]


def test_c_functions_read_only_their_own_parameters(picked):
    """libc's labs (one long) and abs (one int) through the 8-word prototype: the extra words are
    ignored, and an int parameter is the low 32 bits of its word."""
    labs, absolute = LIBC.labs, LIBC.abs
    labs.restype = absolute.restype = ctypes.c_int
    many = [Call("labs", labs, (ctypes.c_long(0),))] * 20_000
    issue_loop.batch(many, _fail).run()
    cases = [
        (labs, ctypes.c_long(-3), 3),
        (absolute, ctypes.c_int(-5), 5),
    ]
    if picked[0] == "c":  # the C loop passes a whole word: the callee reads the low 32 bits
        cases.append((absolute, ctypes.c_uint64((1 << 32) | 6), 6))
    for fn, arg, result in cases:
        with pytest.raises(Failed) as failed:
            issue_loop.batch(
                [Call("ok", labs, (ctypes.c_long(0),)), Call("x", fn, (arg,))], _fail
            ).run()
        assert failed.value.args == ("x", result)


def test_the_c_loop_releases_the_gil_while_it_runs(monkeypatch):
    """Four 50 ms sleeps issued by the C loop: meanwhile another Python thread, which needs the
    GIL for each of its steps, keeps stamping the clock (held, it would stamp nothing inside)."""
    monkeypatch.setenv(envvars.ISSUE_LOOP, "c")
    LIBC.usleep.restype = ctypes.c_int
    issuer = issue_loop.batch([Call("usleep", LIBC.usleep, (ctypes.c_uint(50_000),))] * 4, _fail)
    stamps: list[float] = []
    stop = threading.Event()

    def stamp() -> None:
        while not stop.is_set():
            stamps.append(time.monotonic())
            time.sleep(0.001)

    thread = threading.Thread(target=stamp)
    thread.start()
    try:
        began = time.monotonic()
        issuer.run()
        ended = time.monotonic()
    finally:
        stop.set()
        thread.join()
    inside = [t for t in stamps if began + 0.02 < t < ended - 0.02]
    assert ended - began >= 0.2 and len(inside) >= 5, (ended - began, len(inside))


def test_the_c_loop_refuses_a_buffer_too_small_for_the_count(monkeypatch):
    monkeypatch.setenv(envvars.ISSUE_LOOP, "c")
    loop, why = issue_loop.load()
    assert why == "" and (loop.WORDS, loop.ARGS) == (issue_loop.WORDS, issue_loop.MAX_ARGS)
    records = (ctypes.c_uint64 * (issue_loop.WORDS * 2))()
    with pytest.raises(ValueError, match="^run: 3 records of 80 bytes do not fit"):
        loop.run(records, 3)
    with pytest.raises(ValueError):
        loop.run(records, -1)
    with pytest.raises(TypeError):
        loop.run(bytes(160), 1)  # read-only: the loop writes a failure's result


def test_a_python_call_in_the_batch_keeps_the_ctypes_loop_and_says_why(monkeypatch):
    monkeypatch.delenv(envvars.ISSUE_LOOP, raising=False)
    seen = []
    issuer = issue_loop.batch([Call("py", lambda: seen.append(1) or 0, ())], _fail)
    issuer.run()
    assert seen == [1] and issuer.issued_by == issue_loop.CTYPES
    assert issuer.why == "a call the C loop cannot make (a Python callable, or over 8 arguments)"


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_without_the_extension_the_ctypes_loop_issues_and_c_is_refused():
    """The C loop's import made to fail, in a fresh process, as where no compiler built it."""
    code = HIDDEN + (
        "import ctypes, json\n"
        "from ncclprobe.probes import issue_loop\n"
        "from ncclprobe.errors import Unsupported\n"
        "labs = ctypes.CDLL(None).labs\n"
        "calls = [('labs', labs, (ctypes.c_long(0),)), ('labs', labs, (ctypes.c_long(-3),))]\n"
        "failed = []\n"
        "issuer = issue_loop.batch(calls, lambda name, result: failed.append((name, result)))\n"
        "issuer.run()\n"
        "try:\n"
        "    issue_loop.check({'NCCLPROBE_ISSUE_LOOP': 'C'})\n"
        "    refusal = None\n"
        "except Unsupported as exc:\n"
        "    refusal = str(exc)\n"
        "print(json.dumps([issuer.issued_by, issuer.why, failed, refusal]))\n"
    )
    done = _run_python(code, **{envvars.ISSUE_LOOP: "auto"})
    issued_by, why, failed, refusal = json.loads(done.stdout)
    assert issued_by == issue_loop.CTYPES and failed == [["labs", 3]], done.stderr[-500:]
    assert why.startswith("the C loop is not built in this install (import of ")
    assert refusal.startswith("NCCLPROBE_ISSUE_LOOP=c: the C loop is not built in this install")
    assert refusal.endswith("or set NCCLPROBE_ISSUE_LOOP=auto")


@pytest.mark.parametrize(
    "value, picked",
    [
        (None, "auto"),
        ("", "auto"),
        ("auto", "auto"),
        ("AUTO", "auto"),
        ("c", "c"),
        (" C ", "c"),
        ("ctypes", "ctypes"),
        ("CTYPES", "ctypes"),
        ("Ctypes\n", "ctypes"),
    ],
)
def test_the_variable_takes_its_three_words_in_any_case(value, picked):
    environ = {} if value is None else {envvars.ISSUE_LOOP: value}
    assert issue_loop.choice(environ) == picked


@pytest.mark.parametrize(
    "value", ["off", "0", "1", "false", "c-loop", "python", "ctype", "c types"]
)
def test_the_variable_refuses_anything_else_naming_its_words(value):
    with pytest.raises(UsageProblem) as refused:
        issue_loop.choice({envvars.ISSUE_LOOP: value})
    assert str(refused.value) == (
        f"NCCLPROBE_ISSUE_LOOP={value!r} is not known: use auto, c or ctypes (any case; unset: auto)"
    )


def test_ctypes_asked_for_is_said_and_c_asked_for_where_built_is_taken():
    assert issue_loop.load({envvars.ISSUE_LOOP: "ctypes"}) == (None, "NCCLPROBE_ISSUE_LOOP=ctypes")
    loop, why = issue_loop.load({envvars.ISSUE_LOOP: "c"})
    assert loop is not None and why == ""
    assert issue_loop.check({envvars.ISSUE_LOOP: "auto"}) is None


def _sweep(env: dict, *args: str, prelude: str = "") -> subprocess.CompletedProcess:
    """`ncclprobe sweep` in a fresh process with -X importtime: its stderr says which modules it
    imported before it answered."""
    code = prelude + "from ncclprobe.cli import main\nmain()\n"
    argv = [sys.executable, "-X", "importtime", "-c", code, "sweep", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def _answer(done: subprocess.CompletedProcess) -> tuple[list[str], list[str]]:
    """(stderr's own lines, the modules imported)."""
    lines = done.stderr.splitlines()
    imported = [
        line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")
    ]
    return [line for line in lines if not line.startswith("import time:")], imported


def test_sweep_refuses_an_unknown_value_in_one_line_before_torch_loads(tmp_path):
    done = _sweep({envvars.ISSUE_LOOP: "off"}, "--output", str(tmp_path / "r.jsonl"))
    own, imported = _answer(done)
    assert done.returncode == 2 and done.stdout == ""
    assert own == [
        "ncclprobe: error: NCCLPROBE_ISSUE_LOOP='off' is not known: use auto, c or ctypes "
        "(any case; unset: auto)"
    ]
    assert "torch" not in imported and "ncclprobe.sweep.build" in imported
    assert not (tmp_path / "r.jsonl").exists()
    resumed = _sweep({envvars.ISSUE_LOOP: "0"}, "--resume", str(tmp_path / "r.jsonl"))
    assert resumed.returncode == 2
    assert _answer(resumed)[0] == [
        "ncclprobe: error: NCCLPROBE_ISSUE_LOOP='0' is not known: use auto, c or ctypes "
        "(any case; unset: auto)"
    ]


def test_sweep_refuses_c_where_the_c_loop_is_not_built(tmp_path):
    done = _sweep({envvars.ISSUE_LOOP: "c"}, "--output", str(tmp_path / "r.jsonl"), prelude=HIDDEN)
    own, imported = _answer(done)
    assert done.returncode == 3 and len(own) == 1, own
    assert own[0].startswith("ncclprobe: error: NCCLPROBE_ISSUE_LOOP=c: the C loop is not built")
    assert "torch" not in imported and not (tmp_path / "r.jsonl").exists()


def test_arguments_become_the_words_a_register_holds():
    assert issue_loop.word(ctypes.c_int(-1)) == 2**64 - 1
    assert issue_loop.word(ctypes.c_int(7)) == 7
    assert issue_loop.word(ctypes.c_void_p(None)) == 0
    assert issue_loop.word(ctypes.c_void_p(2**63 + 5)) == 2**63 + 5
    assert issue_loop.word(ctypes.c_size_t(2**40)) == 2**40
    assert issue_loop.word(5) == 5 and issue_loop.word(-1) == 2**64 - 1
    with pytest.raises(TypeError):
        issue_loop.word(ctypes.c_double(1.0))
    with pytest.raises(TypeError, match=r"^not an integer argument: 'x'$"):
        issue_loop.word("x")


def test_only_c_functions_of_up_to_eight_arguments_are_packed():
    labs = LIBC.labs
    assert issue_loop.pack([Call("labs", labs, (ctypes.c_long(0),))]) is not None
    assert issue_loop.pack([Call("py", lambda: None, ())]) is None
    too_many = tuple(ctypes.c_int(0) for _ in range(issue_loop.MAX_ARGS + 1))
    assert issue_loop.pack([Call("labs", labs, too_many)]) is None
    assert issue_loop.pack([Call("labs", labs, too_many[:-1])]) is not None


def test_a_packed_record_holds_the_function_then_each_argument_in_order():
    labs = LIBC.labs
    address = ctypes.cast(labs, ctypes.c_void_p).value
    args = (ctypes.c_long(0), ctypes.c_int(-1), ctypes.c_void_p(7), ctypes.c_size_t(2**40))
    records = issue_loop.pack([Call("a", labs, args), Call("b", labs, (ctypes.c_long(3),))])
    words = list(records)
    assert words[: issue_loop.WORDS] == [address, 0, 2**64 - 1, 7, 2**40, 0, 0, 0, 0, 0]
    assert words[issue_loop.WORDS :] == [address, 3, 0, 0, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("loop", ["c", "ctypes"])
def test_a_communicator_names_a_failing_call_of_another_library(monkeypatch, loop):
    """Communicator.fail: NCCL's words for an NCCL call (GPU test in test_nccl_ctypes.py), the
    number for another (here libc's labs); no NCCL is needed for that."""
    monkeypatch.setenv(envvars.ISSUE_LOOP, loop)
    comm = Communicator.__new__(Communicator)
    comm.lib, comm.handle = None, ctypes.c_void_p()
    labs = LIBC.labs
    issuer = comm.batch(
        [Call("labs", labs, (ctypes.c_long(0),)), Call("labs", labs, (ctypes.c_long(-3),))]
    )
    with pytest.raises(NcclError, match="^labs returned 3$"):
        issuer.run()
    with pytest.raises(NcclError, match="^labs returned 4$"):
        comm.issue([Call("labs", labs, (ctypes.c_long(4),))])
