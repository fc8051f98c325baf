"""Agreement with nccl-tests, measured side by side on one GPU in one call (issue 19, docs/METRICS.md).

    python3 examples/agreement_nccl_tests.py TOOLS_DIR OUT_DIR

TOOLS_DIR holds build-nccl-tests.sh and nccl-tests/ (a copy of ../shared/tools carried to the
device). The script builds all_reduce_perf with MPI (OpenMPI on the H200 machine; without MPI it
falls back to a plain build and skips the two-rank part), then on the same sizes runs:

  one rank   nccl-tests eager (-w 20 -n 100, -J and text: one run in both formats), eager -I 1,
             graph (-G 10 -n 100); ncclprobe sweep: the default torch path (eager and graph),
             graph with --buffers reuse (L2-hot, the old default), the raw NCCL path through cupy
             (--path nccl, eager and graph) and that path without per-iteration events;
  two ranks  on GPU 0, each with its own NCCL_HOSTID: nccl-tests under mpirun (eager and -G 5)
             against ncclprobe sweep --share-gpu 2 (eager and graph).

Everything lands in OUT_DIR (raw outputs, results files, agreement.json, agreement.md); the
agreement table is printed last: nccl-tests' time per call, ncclprobe's, the difference, and the
bound (5 % at 1 MiB and above, 10 % below), out of place (nccl-tests' usual figure) and in place.
Each step has its own time limit; a failed step is reported and the rest still run. Expected wall
time on the one-GPU H200: about 4 minutes (1-1.5 of them building nccl-tests).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from ncclprobe.nccl.recipes import NO_NVLS

SIZES = "8..128M:4"  # 8 B .. 128 MiB, x4: the issue's table sizes are among them
SHARED_SIZES = "1K,32K,1M"  # ranks sharing one GPU talk over sockets: a few sizes suffice
BOUND_LARGE, BOUND_SMALL, LARGE = 0.05, 0.10, 1 << 20
# NVLink multicast stays off everywhere (NO_NVLS), and in torch's and NVSHMEM's own switches too
ENV = {
    **NO_NVLS,
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "PYTHONUNBUFFERED": "1",
}


class Steps:
    """Run commands with a time limit each, log everything, remember what failed."""

    def __init__(self, out: Path):
        self.out, self.log, self.failed = out, out / "log.txt", []
        self.env = {**os.environ, **ENV}

    def run(
        self, name: str, cmd: list[str] | str, limit: int, stdout: Path | None = None, env=None
    ) -> bool:
        began = time.monotonic()
        with open(self.log, "a") as log:
            log.write(
                f"=== {name} (limit {limit}s): {cmd if isinstance(cmd, str) else shlex.join(cmd)}\n"
            )
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
            flush=True,
        )
        if not ok:
            self.failed.append(name)
        return ok


def nccl_lib() -> str:
    import nvidia.nccl

    return str(Path(list(nvidia.nccl.__path__)[0]) / "lib")


def build(steps: Steps, tools: Path, build_dir: Path) -> tuple[Path | None, bool]:
    """(the all_reduce_perf binary, whether it was built with MPI)."""
    script = tools / "build-nccl-tests.sh"
    for mpi in ("1", "0"):
        out = build_dir / f"mpi{mpi}"
        if (
            out / "all_reduce_perf"
        ).exists():  # built earlier (--build-dir): a build is CPU work only
            return out / "all_reduce_perf", mpi == "1"
        if steps.run(
            f"build nccl-tests (MPI={mpi})",
            ["bash", str(script), str(out)],
            300,
            env={"MPI": mpi, "TARGETS": "all_reduce_perf"},
        ):
            return out / "all_reduce_perf", mpi == "1"
    return None, False


def nccl_tests(steps: Steps, binary: Path, mpi: bool, out: Path) -> dict[str, Path]:
    """Run nccl-tests; return name -> its -J file."""
    env = {"LD_LIBRARY_PATH": nccl_lib() + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
    mpirun = [
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-x",
        "LD_LIBRARY_PATH",
        "-x",
        "NCCL_NVLS_ENABLE",
    ]
    one = (mpirun + ["-np", "1"]) if mpi else []
    base = ["-b", "8", "-e", "128M", "-f", "4", "-g", "1", "-w", "20", "-n", "100", "-c", "1"]
    runs = {
        "tests-eager": base,
        "tests-eager-I": base + ["-I", "1"],
        "tests-graph": base + ["-G", "10"],
    }
    done = {}
    for name, args in runs.items():
        json_path = out / f"{name}.json"
        if steps.run(
            name,
            one + [str(binary), *args, "-J", str(json_path)],
            120,
            stdout=out / f"{name}.txt",
            env=env,
        ):
            done[name] = json_path
    if mpi:  # two ranks on GPU 0, each its own NCCL_HOSTID, as sweep --share-gpu 2
        shared = "-b 1K -e 1M -f 32 -g 1 -w 5 -n 20 -c 1"
        for name, extra in (("tests-shared-eager", ""), ("tests-shared-graph", " -G 5")):
            json_path = out / f"{name}.json"
            cmd = (
                shlex.join(mpirun + ["-np", "2", "-x", "NCCL_TESTS_DEVICE=0"])
                + " sh -c "
                + shlex.quote(
                    f"NCCL_HOSTID=h$OMPI_COMM_WORLD_RANK exec {binary} {shared}{extra} -J {json_path}"
                )
            )
            if steps.run(name, cmd, 120, stdout=out / f"{name}.txt", env=env):
                done[name] = json_path
    return done


def ncclprobe(steps: Steps, out: Path, have_cupy: bool) -> dict[str, Path]:
    """Run the sweeps; return name -> results file."""
    sweep = [sys.executable, "-m", "ncclprobe", "-q", "sweep"]
    one = [
        "--sizes",
        SIZES,
        "--warmup",
        "20",
        "--iters",
        "100",
        "--trials",
        "5",
        "--proto",
        "default",
        "--algo",
        "default",
    ]
    runs = {
        "probe-torch": one + ["--mode", "eager,graph"],
        "probe-torch-reuse": one + ["--mode", "graph", "--buffers", "reuse"],
    }
    if have_cupy:
        runs["probe-nccl"] = one + ["--mode", "eager,graph", "--path", "nccl"]
        runs["probe-nccl-no-events"] = one + [
            "--mode",
            "eager",
            "--path",
            "nccl",
            "--no-iter-events",
        ]
    runs["probe-shared"] = [
        "--share-gpu",
        "2",
        "--sizes",
        SHARED_SIZES,
        "--warmup",
        "5",
        "--iters",
        "20",
        "--trials",
        "5",
        "--mode",
        "eager,graph",
        "--proto",
        "default",
        "--algo",
        "default",
    ]
    done = {}
    for name, args in runs.items():
        path = out / f"{name}.jsonl"
        if steps.run(
            name,
            sweep + args + ["--output", str(path), "--format", "json"],
            180,
            stdout=out / f"{name}.json",
        ):
            done[name] = path
    return done


def tests_times(path: Path) -> dict[tuple, float]:
    """(in_place, size) -> nccl-tests' time per call, read with ncclprobe's own -J reader."""
    from ncclprobe.evidence.nccl_tests_json import parse_nccl_tests_json

    run = parse_nccl_tests_json(path.read_text(), str(path))
    return {
        (in_place, row.size_bytes): m.time_us
        for row in run.rows
        for in_place, m in row.measurements()
        if m
    }


def probe_times(path: Path, mode: str) -> dict[tuple, dict]:
    from ncclprobe.records import Status, read_results

    return {
        (r["in_place"], r["size_bytes"]): r
        for r in read_results(path).results
        if r["mode"] == mode and r["status"] == Status.OK and r.get("time_us")
    }


def compare(tests: dict, probe: dict, label: str, note: str = "") -> list[dict]:
    rows = []
    for (in_place, size), reference in sorted(tests.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        record = probe.get((in_place, size))
        if record is None or not reference:
            continue
        bound = BOUND_LARGE if size >= LARGE else BOUND_SMALL
        delta = (record["time_us"] - reference) / reference
        rows.append(
            {
                "compare": label,
                "place": "in" if in_place else "out",
                "size_bytes": size,
                "nccl_tests_us": round(reference, 3),
                "ncclprobe_us": round(record["time_us"], 3),
                "delta_pct": round(100 * delta, 1),
                "bound_pct": round(100 * bound),
                "within": abs(delta) <= bound,
                "cpu_issue_us": record.get("cpu_issue_us"),
                "p99_us": (record.get("iter") or {}).get("p99_us"),
                "note": note,
            }
        )
    return rows


def table(tests: dict[str, Path], probes: dict[str, Path]) -> list[dict]:
    rows = []
    pairs = [
        (
            "tests-eager",
            "probe-torch",
            "eager",
            "torch eager vs nccl-tests eager",
            "torch's host dispatch per call: host-bound where cpu_issue_us ~ time",
        ),
        (
            "tests-eager",
            "probe-nccl",
            "eager",
            "raw NCCL eager (events per iteration) vs nccl-tests eager",
            "",
        ),
        (
            "tests-eager",
            "probe-nccl-no-events",
            "eager",
            "raw NCCL eager (no per-iteration events)",
            "",
        ),
        (
            "tests-eager-I",
            "probe-nccl",
            "eager",
            "raw NCCL eager vs nccl-tests -I 1 (both record events)",
            "",
        ),
        (
            "tests-graph",
            "probe-torch",
            "graph",
            "torch graph (rotating buffers) vs nccl-tests -G 10",
            "",
        ),
        (
            "tests-graph",
            "probe-torch-reuse",
            "graph",
            "torch graph, one reused buffer (L2-hot) vs -G 10",
            "L2 residency: 512 KiB-8 MiB served from the GPU's L2 cache",
        ),
        ("tests-graph", "probe-nccl", "graph", "raw NCCL graph vs nccl-tests -G 10", ""),
        (
            "tests-shared-eager",
            "probe-shared",
            "eager",
            "2 ranks on one GPU, eager",
            "sockets between two processes",
        ),
        (
            "tests-shared-graph",
            "probe-shared",
            "graph",
            "2 ranks on one GPU, graph",
            "sockets between two processes",
        ),
    ]
    for test_name, probe_name, mode, label, note in pairs:
        if test_name in tests and probe_name in probes:
            rows += compare(
                tests_times(tests[test_name]), probe_times(probes[probe_name], mode), label, note
            )
    return rows


ISSUE_SIZES = (8, 8192, 512 << 10, 2 << 20, 8 << 20, 32 << 20, 128 << 20)
SHORT = (
    ("tests eager", "tests-eager", "eager"),
    ("torch eager", "probe-torch", "eager"),
    ("nccl eager", "probe-nccl", "eager"),
    ("tests -G", "tests-graph", "graph"),
    ("torch graph", "probe-torch", "graph"),
    ("torch reuse", "probe-torch-reuse", "graph"),
    ("nccl graph", "probe-nccl", "graph"),
)


def short_table(tests: dict[str, Path], probes: dict[str, Path]) -> str:
    """Out of place, the issue's sizes, every path side by side (µs per call)."""
    columns = {}
    for title, name, mode in SHORT:
        if name in tests:
            columns[title] = tests_times(tests[name])
        elif name in probes:
            columns[title] = {k: r["time_us"] for k, r in probe_times(probes[name], mode).items()}
    head = "| size | " + " | ".join(columns) + " |"
    lines = [head, "|" + "---|" * (len(columns) + 1)]
    for size in ISSUE_SIZES:
        cells = [
            f"{columns[c][(False, size)]:.2f}" if (False, size) in columns[c] else "-"
            for c in columns
        ]
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fixtures(out: Path) -> None:
    """The text and -J of one run each, ready for tests/fixtures/nccl_tests/ (env cut to NCCL_*)."""
    target = out / "fixtures"
    target.mkdir(exist_ok=True)
    for name, stem in (("tests-eager", "eager"), ("tests-eager-I", "eager_I")):
        text, js = out / f"{name}.txt", out / f"{name}.json"
        if not (text.exists() and js.exists()):
            continue
        doc = json.loads(js.read_text())
        doc["env"] = [e for e in doc.get("env") or [] if e.startswith("NCCL_")]
        base = f"allreduce_1x_h200_1rank_nccltests2.19.6_{stem}_same_run"
        (target / f"{base}.json").write_text(json.dumps(doc))
        (target / f"{base}.txt").write_text(
            f"# source: recorded on the one-GPU H200 by examples/agreement_nccl_tests.py "
            f"({' '.join(doc.get('args') or [])}), the stdout of the run whose -J is "
            f"{base}.json\n\n" + text.read_text()
        )


def markdown(rows: list[dict]) -> str:
    lines = []
    for label in dict.fromkeys(r["compare"] for r in rows):
        lines += [
            f"### {label}",
            "",
            "| place | size | nccl-tests µs | ncclprobe µs | Δ % | bound | host issue µs |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in rows if r["compare"] == label):
            lines.append(
                f"| {r['place']} | {r['size_bytes']} | {r['nccl_tests_us']} | {r['ncclprobe_us']} | "
                f"{r['delta_pct']:+.1f}{'' if r['within'] else ' (outside)'} | {r['bound_pct']} | "
                f"{r['cpu_issue_us'] if r['cpu_issue_us'] is None else round(r['cpu_issue_us'], 2)} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tools", type=Path, help="folder with build-nccl-tests.sh and nccl-tests/")
    parser.add_argument("out", type=Path, help="output folder (created)")
    parser.add_argument(
        "--build-dir",
        type=Path,
        help="where nccl-tests is (or gets) built [OUT/build]; a "
        "binary already there is reused, so the build can run earlier, beside GPU work",
    )
    parser.add_argument("--build-only", action="store_true", help="build nccl-tests and stop")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    steps = Steps(args.out)
    began = time.monotonic()
    binary, mpi = build(
        steps, args.tools.resolve(), (args.build_dir or args.out / "build").resolve()
    )
    if args.build_only:
        print(f"built: {binary} (MPI: {mpi})" if binary else "build FAILED", file=sys.stderr)
        return 0 if binary else 1
    tests = nccl_tests(steps, binary, mpi, args.out) if binary else {}
    try:
        import cupy  # noqa: F401

        have_cupy = True
    except ImportError:
        have_cupy = False
        print(
            "cupy is not importable: the raw NCCL path (--path nccl) is not measured",
            file=sys.stderr,
        )
    probes = ncclprobe(steps, args.out, have_cupy)
    rows = table(tests, probes)
    doc = {
        "schema_version": 1,
        "kind": "agreement-nccl-tests",
        "wall_s": round(time.monotonic() - began, 1),
        "mpi": mpi,
        "cupy": have_cupy,
        "failed_steps": steps.failed,
        "rows": rows,
    }
    (args.out / "agreement.json").write_text(json.dumps(doc, indent=1))
    (args.out / "agreement.md").write_text(
        markdown(rows) + "\n\n" + short_table(tests, probes) + "\n"
    )
    fixtures(args.out)
    print(short_table(tests, probes))
    print(
        f"wall {doc['wall_s']} s; failed steps: {', '.join(steps.failed) or 'none'}; "
        f"{sum(r['within'] for r in rows)}/{len(rows)} rows within the bound"
    )
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
