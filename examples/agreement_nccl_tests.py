"""Agreement with nccl-tests, measured side by side on one GPU (issues 19 and 32, docs/METRICS.md).

    python3 examples/agreement_nccl_tests.py TOOLS_DIR OUT_DIR [--part build,tests,sweeps,tables]

TOOLS_DIR holds build-nccl-tests.sh and nccl-tests/ (a copy of ../shared/tools carried to the
device as .tools/). Parts, in order (default: all):

  build   all seven *_perf, a plain build and an MPI build (OpenMPI), side by side
  tests   nccl-tests, one rank (plain build): every collective eager (-w 20 -n 100) and graph
          (-G 10), and for all_reduce the host issue time (-C 1), per-iteration events (-I 1) and
          the graph replay amortisation (-G 1, -G 100, -n 20); two ranks on GPU 0 (MPI build,
          one NCCL_HOSTID each): every collective eager and -G 5, and the rooted ones with the
          slowest rank's time too (-a 3: ncclprobe takes the slowest rank, nccl-tests the mean)
  sweeps  ncclprobe sweep over the same collectives, sizes and buffer span (8 B-128 MiB, the
          largest message is nccl-tests' -e): the raw NCCL path without per-iteration events,
          with every eager row's cost split (the torch path and the events timed beside it), and
          the torch path, eager and graph; the same with --share-gpu 2
  tables  agreement.json (every row) and agreement.md (the side-by-side tables, for docs/LOG.md)

Every step has its own time limit; a failed step is reported and the rest still run; `--deadline`
stops starting new steps after that many seconds, so a device call never loses what it measured.
`--tests-from DIR` supplies an earlier call's nccl-tests outputs for the runs this call skips
(`--one-rank-tests`: the two-rank socket runs); agreement.json names each run's source.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agreement_tables  # noqa: E402  (a sibling script module)

from ncclprobe.nccl.recipes import NO_NVLS  # noqa: E402

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "sendrecv",
)
ROOTED = ("broadcast", "reduce")
SIZES = "8..128M:8"  # 9 sizes, 8 B .. 128 MiB: the table
TESTS_RANGE = ["-b", "8", "-e", "128M", "-f", "8"]
SHARED_SIZES = "1K,32K,1M"  # ranks sharing one GPU talk over sockets: a few sizes suffice
SHARED_RANGE = ["-b", "1K", "-e", "1M", "-f", "32"]
ONE = ["--warmup", "20", "--iters", "100", "--trials", "5"]
SHARED_ITERS = ["--warmup", "5", "--iters", "20", "--trials", "3"]
ENV = {
    **NO_NVLS,
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "PYTHONUNBUFFERED": "1",
}
PARTS = ("build", "tests", "sweeps", "bench", "tables")


class Steps:
    """Run commands with a time limit each, log everything, remember what failed."""

    def __init__(self, out: Path, deadline: float | None):
        self.out, self.log, self.failed, self.skipped = out, out / "log.txt", [], []
        self.env = {**os.environ, **ENV}
        self.began, self.deadline = time.monotonic(), deadline

    def run(self, name: str, cmd, limit: int, stdout: Path | None = None, env=None) -> bool:
        if self.deadline and time.monotonic() - self.began > self.deadline:
            self.skipped.append(name)
            return False
        began = time.monotonic()
        text = cmd if isinstance(cmd, str) else shlex.join(cmd)
        with open(self.log, "a") as log:
            log.write(f"=== {name} (limit {limit}s): {text}\n")
            log.flush()
            try:
                with open(stdout, "w") if stdout else open(os.devnull, "w") as sink:
                    done = subprocess.run(
                        cmd,
                        shell=isinstance(cmd, str),
                        stdout=sink if stdout else log,
                        stderr=log,
                        timeout=limit,
                        env={**self.env, **(env or {})},
                    )
                ok = done.returncode == 0
            except subprocess.TimeoutExpired:
                ok = False
                log.write(f"=== {name}: timed out\n")
            log.write(f"=== {name} ok={ok} wall={time.monotonic() - began:.1f}s\n")
        print(
            f"{name}: {'ok' if ok else 'FAILED'} ({time.monotonic() - began:.0f} s)",
            file=sys.stderr,
        )
        if not ok:
            self.failed.append(name)
        return ok


def nccl_lib() -> str:
    import nvidia.nccl

    return str(Path(list(nvidia.nccl.__path__)[0]) / "lib")


def build(steps: Steps, tools: Path, build_dir: Path) -> dict[str, Path]:
    """{"plain": dir, "mpi": dir} of the builds that exist (built now, or earlier)."""
    script = tools / "build-nccl-tests.sh"
    targets = " ".join(f"{c}_perf" for c in COLLECTIVES)
    wanted = {"plain": build_dir / "plain", "mpi": build_dir / "mpi"}
    missing = {k: d for k, d in wanted.items() if k not in built(build_dir)}
    if missing:  # both builds at once: each is a few nvcc jobs, the machine has the cores
        log = open(steps.log, "a")
        began = time.monotonic()
        procs = {
            kind: subprocess.Popen(
                ["bash", str(script), str(where)],
                stdout=log,
                stderr=log,
                env={**steps.env, "TARGETS": targets, "MPI": "1" if kind == "mpi" else "0"},
            )
            for kind, where in missing.items()
        }
        for kind, proc in procs.items():
            try:
                ok = proc.wait(timeout=240) == 0
            except subprocess.TimeoutExpired:
                proc.kill()
                ok = False
            print(
                f"build {kind}: {'ok' if ok else 'FAILED'} ({time.monotonic() - began:.0f} s)",
                file=sys.stderr,
            )
            if not ok:
                steps.failed.append(f"build-{kind}")
        log.close()
    return built(build_dir)


def built(build_dir: Path) -> dict[str, Path]:
    """The builds an earlier call left in `build_dir`."""
    found = {k: build_dir / k for k in ("plain", "mpi")}
    return {k: d for k, d in found.items() if (d / "sendrecv_perf").exists()}


def one_rank_runs() -> dict[str, tuple[str, list[str]]]:
    """name -> (collective, nccl-tests arguments), one rank."""
    base = [*TESTS_RANGE, "-g", "1", "-w", "20", "-n", "100", "-c", "0"]
    runs = {}
    for c in COLLECTIVES:
        runs[f"tests-{c}-eager"] = (c, base)
        runs[f"tests-{c}-graph"] = (c, base + ["-G", "10"])
    runs["tests-all_reduce-cpu"] = ("all_reduce", base + ["-C", "1"])
    runs["tests-all_reduce-eager-I"] = ("all_reduce", base + ["-I", "1"])
    small = ["-b", "8", "-e", "1M", "-f", "8", "-g", "1", "-w", "20", "-c", "0"]
    for extra, args in (("G1", ["-n", "100", "-G", "1"]), ("G100", ["-n", "100", "-G", "100"])):
        runs[f"tests-all_reduce-graph-{extra}"] = ("all_reduce", small + args)
    runs["tests-all_reduce-graph-n20"] = ("all_reduce", small + ["-n", "20", "-G", "10"])
    return runs


def shared_runs() -> dict[str, tuple[str, list[str]]]:
    """name -> (collective, arguments), two ranks on GPU 0."""
    base = [*SHARED_RANGE, "-g", "1", "-w", "5", "-n", "20", "-c", "0"]
    runs = {}
    for c in COLLECTIVES:
        runs[f"tests-{c}-shared-eager"] = (c, base)
        runs[f"tests-{c}-shared-graph"] = (c, base + ["-G", "5"])
    for c in ROOTED:
        runs[f"tests-{c}-shared-eager-max"] = (c, base + ["-a", "3"])
        runs[f"tests-{c}-shared-graph-max"] = (c, base + ["-G", "5", "-a", "3"])
    return runs


def nccl_tests(steps: Steps, builds: dict[str, Path], out: Path, shared: bool = True) -> None:
    env = {"LD_LIBRARY_PATH": nccl_lib() + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
    plain = builds.get("plain") or builds.get("mpi")
    if plain:
        for name, (coll, args) in one_rank_runs().items():
            cmd = [str(plain / f"{coll}_perf"), *args, "-J", str(out / f"{name}.json")]
            steps.run(name, cmd, 60, stdout=out / f"{name}.txt", env=env)
    if "mpi" not in builds or not shared:
        return
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    mpirun += ["-x", "LD_LIBRARY_PATH", "-x", "NCCL_NVLS_ENABLE", "-x", "NCCL_TESTS_DEVICE=0"]
    for name, (coll, args) in shared_runs().items():
        binary = builds["mpi"] / f"{coll}_perf"
        inner = f"NCCL_HOSTID=h$OMPI_COMM_WORLD_RANK exec {binary} {shlex.join(args)} -J {out / name}.json"
        cmd = shlex.join(mpirun) + " sh -c " + shlex.quote(inner)
        steps.run(name, cmd, 60, stdout=out / f"{name}.txt", env=env)


def sweep_runs() -> dict[str, list[str]]:
    """The raw path without per-iteration events (nccl-tests' eager loop has none) with its cost
    split (the torch path and the events beside every eager row); the torch path as engines run
    it, graph only (its eager figures, with and without events, are the raw rows' cost split)."""
    one = ["--collective", ",".join(COLLECTIVES), "--sizes", SIZES, *ONE, "--mode", "eager,graph"]
    shared = ["--share-gpu", "2", "--collective", ",".join(COLLECTIVES), "--sizes", SHARED_SIZES]
    shared += [*SHARED_ITERS, "--mode", "eager,graph"]
    raw = ["--path", "nccl", "--no-iter-events"]
    return {
        "probe-nccl": one + raw,
        "probe-torch": [*one[:-2], "--mode", "graph", "--no-cost-split"],
        "probe-shared-nccl": shared + raw,
        "probe-shared-torch": [*shared[:-2], "--mode", "graph", "--no-cost-split"],
    }


def sweeps(steps: Steps, out: Path) -> None:
    sweep = [
        sys.executable,
        "-m",
        "ncclprobe",
        "-q",
        "sweep",
        "--proto",
        "default",
        "--algo",
        "default",
    ]
    for name, args in sweep_runs().items():
        path = out / f"{name}.jsonl"
        cmd = sweep + args + ["--output", str(path), "--force", "--format", "json"]
        steps.run(name, cmd, 200, stdout=out / f"{name}.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tools", type=Path, help="folder with build-nccl-tests.sh and nccl-tests/")
    parser.add_argument("out", type=Path, help="output folder (created)")
    parser.add_argument(
        "--build-dir", type=Path, help="where nccl-tests is (or gets) built [OUT/build]"
    )
    parser.add_argument(
        "--part", default=",".join(PARTS), help=f"comma separated: {','.join(PARTS)}"
    )
    parser.add_argument(
        "--tests-from", type=Path, help="earlier nccl-tests outputs, for the runs this call skips"
    )
    parser.add_argument(
        "--one-rank-tests", action="store_true", help="run only the one-rank nccl-tests"
    )
    parser.add_argument("--deadline", type=float, help="start no step after this many seconds")
    args = parser.parse_args()
    parts = set(args.part.split(","))
    if not parts <= set(PARTS):
        print(f"--part: one of {', '.join(PARTS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    steps = Steps(args.out, args.deadline)
    build_dir = (args.build_dir or args.out / "build").resolve()
    builds = build(steps, args.tools.resolve(), build_dir) if "build" in parts else built(build_dir)
    if "tests" in parts:
        nccl_tests(steps, builds, args.out, shared=not args.one_rank_tests)
    if "sweeps" in parts:
        sweeps(steps, args.out)
    if "bench" in parts:
        bench = Path(__file__).resolve().parent / "bench_raw_nccl_calls.py"
        cmd = [sys.executable, str(bench), str(args.out / "bench-layouts.json"), "--graph-layouts"]
        steps.run("bench-layouts", cmd, 120)
    if "tables" in parts:
        dirs = [d for d in (args.tests_from, args.out) if d]  # this call's outputs win
        wall = time.monotonic() - steps.began
        agreement_tables.write(dirs, args.out, steps.failed, steps.skipped, wall)
    print(
        f"failed: {', '.join(steps.failed) or 'none'}; skipped: {', '.join(steps.skipped) or 'none'}",
        file=sys.stderr,
    )
    return 1 if steps.failed else 0


if __name__ == "__main__":
    sys.exit(main())
