"""One-rank eager agreement with nccl-tests over several processes per tool (issue 32, docs/LOG.md).

    python3 examples/agreement_processes.py TOOLS_DIR OUT_DIR [--rounds N] [--deadline S]

Why several processes: on the H200 VM every new process drew a host speed (docs/LOG.md
2026-12-02), nccl-tests' processes too, so at the sizes where both tools are host-bound one process
per tool decides nothing. Each round runs, each in a new process, nccl-tests' seven `*_perf` (one
rank, `-b 8 -e 128M -f 8 -w 20 -n 100 -c 0`, in and out of place) and one `ncclprobe sweep` of the
same collectives, sizes and buffer span on the raw path (`--path nccl --no-iter-events
--no-cost-split`, eager, `--warmup 20 --iters 100 --trials 5`), once with the C issue loop
(NCCLPROBE_ISSUE_LOOP=c: where the extension is not built the sweep refuses, exit 3, rather than
fall back unseen) and once with the Python ctypes loop (NCCLPROBE_ISSUE_LOOP=ctypes), tools
alternated so a slow period of the machine hits all. Then `processes.json` (every process's figure,
and what issued each sweep's rows: `issued_by`) and `processes.md`: per collective, placement and
size the median and range over processes of each tool, the difference of the medians and of the
fastest processes, and whether the medians are within 15 %.
TOOLS_DIR is a copy of ../shared/tools (build-nccl-tests.sh and nccl-tests/), carried as .tools/.
The C loop must be built first (`pip install --no-deps --no-build-isolation -e .`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import agreement_nccl_tests as agree  # noqa: E402  (sibling script modules)
import agreement_tables  # noqa: E402

from ncclprobe.envvars import ISSUE_LOOP  # noqa: E402

BOUND = agreement_tables.BOUND_ONE_RANK
TOOLS = ("nccl-tests", "ncclprobe", "ncclprobe-ctypes")
TESTS = ["-b", "8", "-e", "128M", "-f", "8", "-g", "1", "-w", "20", "-n", "100", "-c", "0"]
SWEEP = ["--path", "nccl", "--no-iter-events", "--no-cost-split", "--mode", "eager"]
SWEEP += ["--placement", "both", "--sizes", agree.SIZES, *agree.ONE]
SWEEP += ["--proto", "default", "--algo", "default"]


def one_round(steps, binaries: Path, out: Path, k: int, collectives) -> None:
    env = {"LD_LIBRARY_PATH": agree.nccl_lib() + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
    for coll in collectives:
        name = f"tests-{coll}-r{k}"
        cmd = [str(binaries / f"{coll}_perf"), *TESTS, "-J", str(out / f"{name}.json")]
        steps.run(name, cmd, 90, stdout=out / f"{name}.txt", env=env)
    sweep = [sys.executable, "-m", "ncclprobe", "-q", "sweep"]
    sweep += ["--collective", ",".join(collectives), *SWEEP]
    runs = ((f"sweep-r{k}", {ISSUE_LOOP: "c"}), (f"sweep-ctypes-r{k}", {ISSUE_LOOP: "ctypes"}))
    for name, env in runs:
        path = out / f"{name}.jsonl"
        cmd = sweep + ["--output", str(path), "--force", "--format", "json"]
        steps.run(name, cmd, 240, stdout=out / f"{name}.json", env=env)


def issued_by(out: Path) -> dict:
    """{sweep tool: {issued_by: rows}}: what issued each sweep's eager rows."""
    seen: dict[str, dict[str, int]] = {}
    for tool, pattern in (
        ("ncclprobe", "sweep-r*.jsonl"),
        ("ncclprobe-ctypes", "sweep-ctypes-r*.jsonl"),
    ):
        counts = seen.setdefault(tool, {})
        for path in sorted(out.glob(pattern)):
            for r in agreement_tables.probe_records(path):
                key = str(r.get("issued_by"))
                counts[key] = counts.get(key, 0) + 1
    return seen


def gather(out: Path) -> dict:
    """{(collective, placement, size): {tool: [µs per process]}} for every tool of TOOLS (the
    sweep with the C issue loop, and with the Python ctypes loop)."""
    rows: dict[tuple, dict[str, list[float]]] = {}

    def add(key, tool, us):
        rows.setdefault(key, {t: [] for t in TOOLS})[tool].append(us)

    for path in sorted(out.glob("tests-*-r*.json")):
        coll = path.stem.split("-")[1]
        for (in_place, size), us in agreement_tables.tests_times(path).items():
            add((coll, "in" if in_place else "out", size), "nccl-tests", us)
    sweeps = (("ncclprobe", "sweep-r*.jsonl"), ("ncclprobe-ctypes", "sweep-ctypes-r*.jsonl"))
    for tool, pattern in sweeps:
        for path in sorted(out.glob(pattern)):
            for r in agreement_tables.probe_records(path):
                add(
                    (r["collective"], "in" if r["in_place"] else "out", r["size_bytes"]),
                    tool,
                    r["time_us"],
                )
    return rows


def _delta(ours: float, theirs: float) -> float:
    return round((ours - theirs) / theirs * 100, 1)


def table(rows: dict) -> tuple[list[dict], str]:
    """The compared rows and their markdown: a row is compared only where both tools measured it
    and nccl-tests moved bytes (at 8 B its all_gather, reduce_scatter and alltoall move none)."""
    done, lines = [], []
    lines.append(
        "| collective | placement | size | nccl-tests median [range] | ncclprobe median [range] "
        "| Δ medians | Δ fastest | within 15 % | ncclprobe, ctypes loop: median (Δ) |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for (coll, placement, size), tools in sorted(rows.items()):
        theirs, ours = tools["nccl-tests"], tools["ncclprobe"]
        if not theirs or not ours or min(theirs) <= 0:
            continue
        row = {
            "collective": coll,
            "placement": placement,
            "size_bytes": size,
            "nccl_tests_us": theirs,
            "ncclprobe_us": ours,
            "delta_median_pct": _delta(statistics.median(ours), statistics.median(theirs)),
            "delta_fastest_pct": _delta(min(ours), min(theirs)),
        }
        row["within"] = abs(row["delta_median_pct"]) <= BOUND
        slow = tools["ncclprobe-ctypes"]
        row["ncclprobe_ctypes_us"] = slow
        ctypes_text = "-"
        if slow:
            row["ctypes_delta_median_pct"] = _delta(
                statistics.median(slow), statistics.median(theirs)
            )
            ctypes_text = f"{statistics.median(slow):.2f} ({row['ctypes_delta_median_pct']:+.1f} %)"
        done.append(row)
        lines.append(
            f"| {coll} | {placement} | {size} | {statistics.median(theirs):.2f} "
            f"[{min(theirs):.2f}-{max(theirs):.2f}] | {statistics.median(ours):.2f} "
            f"[{min(ours):.2f}-{max(ours):.2f}] | {row['delta_median_pct']:+.1f} % "
            f"| {row['delta_fastest_pct']:+.1f} % | {'yes' if row['within'] else 'no'} "
            f"| {ctypes_text} |"
        )
    met = sum(r["within"] for r in done)
    lines.append("")
    lines.append(f"{met} of {len(done)} rows within {BOUND:.0f} % (medians over processes).")
    return done, "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tools", type=Path, help="folder with build-nccl-tests.sh and nccl-tests/")
    parser.add_argument("out", type=Path, help="output folder (created)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--collectives", default=",".join(agree.COLLECTIVES))
    parser.add_argument("--build-dir", type=Path, help="where nccl-tests is (or gets) built")
    parser.add_argument("--deadline", type=float, help="start no step after this many seconds")
    args = parser.parse_args()
    collectives = [c for c in args.collectives.split(",") if c]
    if args.rounds < 1 or not set(collectives) <= set(agree.COLLECTIVES):
        print(f"--rounds ≥ 1; --collectives among {','.join(agree.COLLECTIVES)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    steps = agree.Steps(args.out, args.deadline)
    build_dir = (args.build_dir or args.out / "build").resolve()
    builds = agree.build(steps, args.tools.resolve(), build_dir)
    binaries = builds.get("plain") or builds.get("mpi")
    if binaries is None:
        print("nccl-tests did not build: see log.txt", file=sys.stderr)
        return 1
    for k in range(args.rounds):
        one_round(steps, binaries, args.out, k, collectives)
    done, text = table(gather(args.out))
    wall = round(time.monotonic() - steps.began)
    doc = {"rows": done, "failed": steps.failed, "skipped": steps.skipped, "wall_s": wall}
    doc["issued_by"] = issued_by(args.out)
    (args.out / "processes.json").write_text(json.dumps(doc, indent=1))
    (args.out / "processes.md").write_text(text)
    print(text)
    print(f"issued by: {json.dumps(doc['issued_by'])}")
    return 1 if steps.failed else 0


if __name__ == "__main__":
    sys.exit(main())
