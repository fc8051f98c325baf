"""What one prepared C call costs the host through each issue loop of the raw path; CPU only, no GPU
(issue 38; figures in docs/LOG.md 2026-12-06).

    python3 examples/bench_issue_loop.py OUT.json [--processes 7] [--batches 2000]
                                         [--machine-code-from REV] [--cupy-model CYTHON]

The callee is a C function of ncclAllReduce's shape (two pointers, a size_t, two ints, two
pointers) that returns 0, compiled here with `cc` into a temporary folder, so what is timed is the
loop's own cost, not NCCL's. A batch is 100 calls (the sweep's `--iters 100`) prepared once, as
the sweep prepares a trial, and issued through `ncclprobe.probes.issue_loop.batch`, the sweep's
own entry; a process issues `--batches` batches after a warm-up, five times, and reports the
median ns per call. The loops:

  c-loop        the C loop (probes/_issue_loop.c), NCCLPROBE_ISSUE_LOOP=c
  ctypes        the Python loop of ctypes calls, NCCLPROBE_ISSUE_LOOP=ctypes
  machine-code  with --machine-code-from REV only: the x86-64 machine-code loop that the C loop
                replaced (issue 38), its module read from this repository's git history at REV
                (0a0aa66 holds it), to measure the old loop beside the new one
  cupy-model    with --cupy-model CYTHON only (the `cython` command, which translates it): a
                model of cupy's NCCL binding, `NcclCommunicator.allReduce` of
                cupy_backends/cuda/libs/nccl.pyx (cupy 14) reduced to its per-call work (a
                Cython method of six typed arguments, the GIL released around the C call, the
                status checked), called once per call from a Python loop over prepared
                arguments; a model of cupy's shape, not cupy (docs/DESIGN.md, issue 38)

Each loop runs in `--processes` fresh processes, the loops alternated so a slow period of a shared
machine hits all; OUT.json holds every process's figure and per loop the median and p10/p90 over
processes (the lines printed are the same).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from ncclprobe import envvars
from ncclprobe.probes.issue_loop import address_of, word
from ncclprobe.stats import quantile

CALLS, REPEATS, WARMUP_BATCHES = 100, 5, 20
CALLEE = """#include <stddef.h>
int callee(void *send, void *recv, size_t count, int type, int op, void *comm, void *stream)
{ return 0; }
"""
# -> NCCLPROBE_ISSUE_LOOP (the last two do not read it)
LOOPS = {"c-loop": "c", "ctypes": "ctypes", "machine-code": "auto", "cupy-model": "auto"}
CUPY_MODEL = """# distutils: language = c++
from libc.stdint cimport intptr_t
ctypedef int (*all_reduce_t)(const void*, void*, size_t, int, int, void*, void*) noexcept nogil
cdef all_reduce_t target = NULL
class NcclError(RuntimeError):
    pass
cpdef inline check_status(int status):
    if status != 0:
        raise NcclError(status)
cdef class NcclCommunicator:
    cdef void* _comm
    def __init__(self, intptr_t address):
        global target
        target = <all_reduce_t>address
    def allReduce(self, intptr_t sendbuf, intptr_t recvbuf, size_t count, int datatype, int op,
                  intptr_t stream):
        with nogil:
            status = target(<void*>sendbuf, <void*>recvbuf, count, datatype, op, self._comm,
                            <void*>stream)
        check_status(status)
"""


def _calls(library: str) -> list[tuple]:
    fn = ctypes.CDLL(library)["callee"]
    fn.restype = ctypes.c_int
    args = (ctypes.c_void_p(1 << 40), ctypes.c_void_p(2 << 40), ctypes.c_size_t(8))
    args += (ctypes.c_int(7), ctypes.c_int(0), ctypes.c_void_p(3 << 40), ctypes.c_void_p(4))
    return [("callee", fn, args)] * CALLS


def _never(name: str, result: int):
    raise RuntimeError(f"{name} returned {result}")


def _issuer(loop: str, calls, module: str | None):
    """(a function issuing one batch, what issues it)."""
    if loop == "cupy-model":
        sys.path.insert(0, module)
        import cupy_model

        call = cupy_model.NcclCommunicator(address_of(calls[0][1])).allReduce
        prepared = [tuple(word(a) for a in args[:5]) + (word(args[6]),) for _, _, args in calls]

        def run() -> None:
            for args in prepared:
                call(*args)

        return run, "a Python loop of calls to a Cython method shaped as cupy's allReduce"
    if loop == "machine-code":
        spec = importlib.util.spec_from_file_location("old_issue_loop", module)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        mapped, name = old._map()
        if mapped is None:
            raise SystemExit(f"the machine-code loop did not load: {name}")
        records, count = old.pack(calls), len(calls)
        return (lambda: mapped.run(ctypes.addressof(records), count)), name
    from ncclprobe.probes import issue_loop

    issuer = issue_loop.batch(calls, _never)
    return issuer.run, issuer.issued_by


def one(loop: str, library: str, batches: int, module: str | None) -> dict:
    """This process's figure for one loop: median ns per call over REPEATS."""
    run, issued_by = _issuer(loop, _calls(library), module)
    for _ in range(WARMUP_BATCHES):
        run()
    samples = []
    for _ in range(REPEATS):
        began = time.perf_counter_ns()
        for _ in range(batches):
            run()
        samples.append((time.perf_counter_ns() - began) / (batches * CALLS))
    return {"loop": loop, "issued_by": issued_by, "ns_per_call": statistics.median(samples)}


def _compile(folder: Path) -> str:
    (folder / "callee.c").write_text(CALLEE)
    library = folder / "libcallee.so"
    cmd = ["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(folder / "callee.c")]
    subprocess.run(cmd, check=True)
    return str(library)


def _cupy_model(folder: Path, cython: str) -> str:
    """The model built into `folder` for this interpreter: cython to C++, then c++."""
    (folder / "cupy_model.pyx").write_text(CUPY_MODEL)
    source = folder / "cupy_model.cpp"
    subprocess.run(
        [cython, "-3", "--cplus", "-o", str(source), str(folder / "cupy_model.pyx")], check=True
    )
    target = folder / f"cupy_model{sysconfig.get_config_var('EXT_SUFFIX')}"
    include = sysconfig.get_paths()["include"]
    cmd = ["c++", "-O2", "-shared", "-fPIC", f"-I{include}", "-o", str(target), str(source)]
    subprocess.run(cmd, check=True)
    return str(folder)


def _old_module(folder: Path, rev: str) -> str:
    text = subprocess.run(
        ["git", "show", f"{rev}:probes/issue_loop.py"],
        cwd=Path(__file__).resolve().parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = folder / "old_issue_loop.py"
    path.write_text(text)
    return str(path)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def summary(rows: list[dict]) -> dict:
    """Per loop: the processes' figures, their median and p10/p90, ns per call."""
    out = {}
    for loop in dict.fromkeys(r["loop"] for r in rows):
        values = [r["ns_per_call"] for r in rows if r["loop"] == loop]
        out[loop] = {
            "processes": len(values),
            "median_ns": round(statistics.median(values), 1),
            "p10_ns": round(quantile(values, 10, of=100), 1),
            "p90_ns": round(quantile(values, 90, of=100), 1),
            "ns_per_call": [round(v, 1) for v in values],
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--processes", type=int, default=7)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--machine-code-from", metavar="REV")
    parser.add_argument("--cupy-model", metavar="CYTHON")
    parser.add_argument("--one", nargs=2, metavar=("LOOP", "LIBRARY"), help=argparse.SUPPRESS)
    parser.add_argument("--module", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args.batches, args.module)))
        return 0
    if args.out is None or args.processes < 1 or args.batches < 1:
        print("give OUT.json; --processes and --batches are at least 1", file=sys.stderr)
        return 2
    loops = ["c-loop", "ctypes"] + (["machine-code"] if args.machine_code_from else [])
    loops += ["cupy-model"] if args.cupy_model else []
    rows, load_before = [], [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench-issue-loop-") as tmp:
        library = _compile(Path(tmp))
        modules = {}
        if args.machine_code_from:
            modules["machine-code"] = _old_module(Path(tmp), args.machine_code_from)
        if args.cupy_model:
            modules["cupy-model"] = _cupy_model(Path(tmp), args.cupy_model)
        for k in range(args.processes):
            for loop in loops[k % len(loops) :] + loops[: k % len(loops)]:
                cmd = [sys.executable, __file__, "--one", loop, library]
                cmd += ["--batches", str(args.batches)]
                cmd += ["--module", modules[loop]] if loop in modules else []
                env = {**os.environ, envvars.ISSUE_LOOP: LOOPS[loop]}
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"{loop}: exit {done.returncode}: {done.stderr[-2000:]}", file=sys.stderr)
                    return 1
                rows.append(json.loads(done.stdout))
                print(done.stdout.strip(), flush=True)
    doc = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {_cpu_model()}",
        "python": platform.python_version(),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "calls_per_batch": CALLS,
        "batches": args.batches,
        "repeats": REPEATS,
        "loops": summary(rows),
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1))
    for loop, figures in doc["loops"].items():
        print(
            f"{loop}: median {figures['median_ns']} ns per call, p10-p90 "
            f"{figures['p10_ns']}-{figures['p90_ns']} over {figures['processes']} processes"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
