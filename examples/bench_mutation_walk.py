"""The full mutated-input walk and the regex bombs, with their counts, times and memory (issue 40
§3 and §4; tests/test_trust_mutations.py and tests/test_trust_parsers.py run a bounded part in CI).

Run: python examples/bench_mutation_walk.py [--seeds 20] [--long 4194304] [--json OUT]
(CPU only; about 20 minutes at 20 seeds on the shared 2-core machine)

1. The walk: every real fixture of tests/test_trust_mutations.py's TARGETS, broken by every one of
   its MUTATIONS (type swaps, huge and non-ASCII numbers, NaN, nesting, nulls, duplicate keys,
   trailing data, truncation, NUL bytes, long lines, blank lines, surrogates, control
   characters), each at `--seeds` positions (a generator seeded by the case's name and the seed),
   through the command that reads it, in-process. Counted: cases, answers by exit code, exit 4s
   (must be 0), raw control characters printed (must be 0), the slowest case, the process's peak
   RSS (must stay under 2 GB).
2. The bombs: each line the pattern audit (examples/bench_regex_bombs.py) found quadratic, at 1 MB
   and at `--long` characters, in a file of the kind whose reader met it, each through its
   command in a fresh process: seconds and peak RSS (targets: within seconds, under 500 MB for
   inputs under 1 MB).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "tests" / "fixtures"
# (name, what starts the file, the line's repeated piece, what ends it, the command)
BOMBS = [
    (
        "p2p name before (?:.*\\s)?",
        "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\n",
        "p2pBandwidthLatencyTest ",
        "\n",
        ["import"],
    ),
    (
        "collect-env lazy key",
        "PyTorch version: 2.1\naa",
        " ",
        "b: c\n",
        ["knobs", "--lint", "--collect-env"],
    ),
    (
        "nccl-log hex busId before .*",
        "h:1:1 [0] NCCL INFO comm 0xa rank 0 nranks 0 cudaDev 0 busId ",
        "a",
        " - Init x\n",
        ["nccl-log"],
    ),
    ("job log unclosed (", "", "[PG ID 0 PG GUID a(", "\n", ["diagnose", "--log"]),
    ("job log lazy .*?", "", "work sequence id: 0a:", "\n", ["diagnose", "--log"]),
    ("job log peer [", "", "Connection closed by peer [", "\n", ["diagnose", "--log"]),
    ("blank lines under ^\\s* (import's sniffers)", "", "\n", "", ["import"]),
]


def walk(seeds: int) -> dict:
    from click.testing import CliRunner

    from ncclprobe.cli import cli
    from tests.data.control import raw_controls
    from tests.test_trust_mutations import (
        MUTATIONS,
        TARGETS,
        _args,
        _write,
        peak_rss,
        reset_peak_rss,
    )

    runner, codes, worst, leaks, fours = CliRunner(), Counter(), (0.0, ""), [], []
    reset_peak_rss()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for target in TARGETS:
            name, fixture, _ = target
            source = FIXTURES / fixture
            gzipped = source.suffix == ".gz"
            raw = source.read_bytes()
            text = (gzip.decompress(raw) if gzipped else raw).decode("utf-8")
            for kind, mutate in MUTATIONS.items():
                for seed in range(seeds):
                    where = f"{name} <- {kind}" + (f" #{seed}" if seed else "")
                    mutated = mutate(text, random.Random(where))
                    if mutated is None or mutated == text:
                        continue
                    case = base / f"c{sum(codes.values())}"
                    case.mkdir()
                    path = case / source.name
                    _write(path, mutated, gzipped)
                    t0 = time.perf_counter()
                    result = runner.invoke(cli, _args(target, path, case), prog_name="ncclprobe")
                    seconds = time.perf_counter() - t0
                    codes[result.exit_code] += 1
                    worst = max(worst, (seconds, where))
                    if result.exit_code not in (0, 1, 2, 3):
                        fours.append((where, result.exit_code, result.output[-300:]))
                    if raw_controls(result.output):
                        leaks.append(where)
                    for p in sorted(case.rglob("*"), reverse=True):
                        p.unlink() if p.is_file() else p.rmdir()
                    case.rmdir()
    return {
        "cases": sum(codes.values()),
        "exit_codes": dict(sorted(codes.items())),
        "internal_errors": fours,
        "raw_control_characters": leaks,
        "slowest_s": round(worst[0], 2),
        "slowest_case": worst[1],
        "peak_rss_mb": peak_rss() >> 20,
        "seconds": round(time.perf_counter() - started, 1),
    }


_RUN = """
import sys
try:
    from ncclprobe.cli import main
    sys.argv = ["ncclprobe", *sys.argv[2:]]
    main()
finally:
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
    open({out!r}, "w").write(str(int(hwm[0].split()[1]) * 1024))
"""


def bombs(sizes: list[int]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for name, head, piece, tail, command in BOMBS:
            for size in sizes:
                path = base / "bomb.txt"
                path.write_text(head + piece * (size // len(piece)) + tail)
                rss = base / "rss"
                t0 = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-c", _RUN.format(out=str(rss)), "x", *command, str(path)],
                    capture_output=True,
                    text=True,
                    timeout=600,
                    cwd=base,
                )
                rows.append(
                    {
                        "bomb": name,
                        "characters": size,
                        "exit": proc.returncode,
                        "seconds": round(time.perf_counter() - t0, 2),
                        "peak_rss_mb": int(rss.read_text()) >> 20,
                        "answer": (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1][:120],
                    }
                )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--long", type=int, default=4 << 20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--skip-walk", action="store_true")
    args = parser.parse_args()
    doc = {"bombs": bombs([1 << 20, args.long])}
    for row in doc["bombs"]:
        print(
            f"{row['bomb']:45} {row['characters']:>9} chars: exit {row['exit']}, "
            f"{row['seconds']:6.2f} s, {row['peak_rss_mb']:4d} MB  {row['answer']}"
        )
    if not args.skip_walk:
        doc["walk"] = walk(args.seeds)
        print(json.dumps(doc["walk"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    bad = doc.get("walk", {}).get("internal_errors") or doc.get("walk", {}).get(
        "raw_control_characters"
    )
    return 1 if bad or any(row["exit"] not in (0, 1, 2, 3) for row in doc["bombs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
