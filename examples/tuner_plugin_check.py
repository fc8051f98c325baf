"""Check the tuner CSV `ncclprobe recommend --emit tuner-csv` writes against NCCL's own example tuner
plugin, compiled from NCCL's source: does the plugin parse every row, and apply each row, and only
it, to the sizes it covers?

NCCL's source is not part of this project: give the directory that holds NCCL's
`ext-tuner/example/plugin.c` and its `nccl/` headers (common.h, err.h, tuner.h) at the release tag
to check (v2.28.9-1 for the H200's NCCL 2.28.9). Stage 1 needs only a C compiler (cc, or nvcc):
it builds libnccl-tuner-example.so and a small harness of ours that loads it with dlopen, points
NCCL_TUNER_CONFIG_FILE at each CSV, and asks the plugin's getCollInfo at every row's first, middle
and last byte count (and just outside the rows), as NCCL would, with a cost table of 1.0 everywhere:
the entry the plugin sets to 0.0 is its choice. Stage 2 (`--nccl`, one GPU) lets NCCL itself load
the plugin in a two-rank `sweep --share-gpu 2` with the rows made node- and rank-agnostic (-1; the
ranks meet as two nodes there), and compares NCCL's TUNING lines with the rows.

The CSVs come from ncclprobe's own emitter, over result sets whose right recommendation is known
(tests/data/resultsets.py, as tests/test_recommend_emit.py builds them): per-size winners with
tree and ring, LL and Simple, two collectives, a wildcard block from a torchrun plan.

Run:  python examples/tuner_plugin_check.py PLUGIN_SRC_DIR OUT_DIR [--nccl]
Prints one line per row and a table last; writes OUT_DIR/tuner_check.json. Exit 1 when a row is
not applied as written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ncclprobe.nccl.names import ALGORITHM_NAMES, PROTOCOL_NAMES, TUNED_FUNCTIONS  # noqa: E402

FUNCS = {name: index for index, name in enumerate(TUNED_FUNCTIONS)}  # ncclFunc_t
ALGOS = tuple(name.lower() for name in ALGORITHM_NAMES)  # NCCL_ALGO_*
PROTOS = tuple(name.lower() for name in PROTOCOL_NAMES)  # NCCL_PROTO_*

HARNESS = r"""
/* ncclprobe's harness: load a tuner plugin and ask it what NCCL would ask. Reads "func bytes"
   lines, prints "func bytes result algo proto channels" (algo/proto -1: the plugin chose nothing). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "tuner.h"

static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "PLUGIN ");
  vfprintf(stderr, fmt, args);
  fprintf(stderr, "\n");
  va_end(args);
}

int main(int argc, char** argv) {
  if (argc != 4) { fprintf(stderr, "usage: harness PLUGIN.so NRANKS NNODES < queries\n"); return 2; }
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  ncclTuner_v5_t* tuner = (ncclTuner_v5_t*)dlsym(lib, NCCL_TUNER_PLUGIN_SYMBOL);
  if (!tuner) { fprintf(stderr, "no %s in %s\n", NCCL_TUNER_PLUGIN_SYMBOL, argv[1]); return 2; }
  void* context = NULL;
  if (tuner->init(&context, 0, (size_t)atoll(argv[2]), (size_t)atoll(argv[3]), logger, NULL, NULL) != ncclSuccess) return 3;
  int func;
  unsigned long long bytes;
  while (scanf("%d %llu", &func, &bytes) == 2) {
    float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    float* rows[NCCL_NUM_ALGORITHMS];
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
      rows[a] = table[a];
      for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) table[a][p] = 1.0f;
    }
    int channels = -2, algo = -1, proto = -1;
    ncclResult_t result = tuner->getCollInfo(context, (ncclFunc_t)func, (size_t)bytes, 1, rows,
                                             NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0, &channels);
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
      for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++)
        if (table[a][p] == 0.0f) { algo = a; proto = p; }
    printf("%d %llu %d %d %d %d\n", func, bytes, (int)result, algo, proto, channels);
  }
  tuner->finalize(context);
  return 0;
}
"""


def emitted_csvs(workdir: Path) -> dict[str, str]:
    """Tuner CSVs from ncclprobe's emitter over result sets whose recommendation is known."""
    from ncclprobe.recommend import build_recommendation
    from ncclprobe.recommend.emit import tuner_csv
    from tests.data.resultsets import config, curve, scaled, write_set

    default = curve(20.0, 0.05)
    tree_ll = config({"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}, scaled(default, 0.6, 1.4))
    ring_simple = config({"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}, scaled(default, 1.3, 0.7))
    sets = {
        "tree-ll-then-ring-simple": [config({}, default), tree_ll, ring_simple],
        "ring-ll-only-small": [
            config({}, default),
            config({"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}, scaled(default, 0.6, 1.3)),
        ],
    }
    out = {}
    for name, configs in sets.items():
        rec = build_recommendation([write_set(workdir / f"{name}.jsonl", configs)])
        out[name] = tuner_csv(rec)
    gathered = write_set(
        workdir / "all-gather.jsonl",
        [
            config({}, default, collective="all_gather"),
            config(
                {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"},
                scaled(default, 0.5, 0.5),
                collective="all_gather",
            ),
        ],
    )
    out["all-gather-ring-ll"] = tuner_csv(build_recommendation([gathered], collective="all_gather"))
    return out


def data_rows(text: str) -> list[list[str]]:
    return [
        [f.strip() for f in line.split(",")]
        for line in text.splitlines()
        if line and not line.startswith("#")
    ]


def build(src: Path, out: Path) -> tuple[Path, Path]:
    """libnccl-tuner-example.so from NCCL's plugin.c, and our harness against NCCL's tuner.h."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("nvcc")
    if cc is None:
        raise SystemExit("no C compiler (cc, gcc or nvcc) on PATH")
    headers = src / "nccl"
    for needed in (src / "plugin.c", headers / "tuner.h", headers / "common.h", headers / "err.h"):
        if not needed.is_file():
            raise SystemExit(f"{needed} is missing: give NCCL's ext-tuner/example directory")
    plugin, harness_src, harness = (
        out / "libnccl-tuner-example.so",
        out / "harness.c",
        out / "harness",
    )
    harness_src.write_text(HARNESS)
    shared = ["-Xcompiler", "-fPIC", "-shared"] if cc.endswith("nvcc") else ["-fPIC", "-shared"]
    subprocess.run(
        [cc, f"-I{headers}", *shared, "-o", str(plugin), str(src / "plugin.c")], check=True
    )
    subprocess.run([cc, f"-I{headers}", "-o", str(harness), str(harness_src), "-ldl"], check=True)
    return plugin, harness


def queries(rows: list[list[str]]) -> list[tuple[int, int]]:
    """Each row's first, middle (geometric) and last byte count, and the byte counts just outside."""
    points = set()
    for row in rows:
        func, lo, hi = FUNCS.get(row[0], -1), int(row[1]), int(row[2])
        mid = int(math.sqrt(max(lo, 1) * hi))
        points.update((func, b) for b in (lo, mid, hi, hi + 1) if b >= 0)
        if lo > 0:
            points.add((func, lo - 1))
    return sorted(points)


def expected(rows: list[list[str]], func: int, size: int) -> tuple[int, int, int] | None:
    """What the CSV means at one query: the first row covering it (algo, proto, channels), or none."""
    for row in rows:
        if FUNCS.get(row[0]) == func and int(row[1]) <= size <= int(row[2]):
            channels = int(row[5])
            return ALGOS.index(row[3]), PROTOS.index(row[4]), 1 if channels == -1 else channels
    return None


def ask(
    harness: Path, plugin: Path, csv: Path, points, nranks: int, nnodes: int
) -> tuple[dict, list[str]]:
    done = subprocess.run(
        [str(harness), str(plugin), str(nranks), str(nnodes)],
        input="".join(f"{f} {b}\n" for f, b in points),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NCCL_TUNER_CONFIG_FILE": str(csv)},
    )
    answers = {}
    for line in done.stdout.splitlines():
        func, size, result, algo, proto, channels = map(int, line.split())
        answers[(func, size)] = (result, algo, proto, channels)
    return answers, [line for line in done.stderr.splitlines() if "Loaded config:" in line]


def stage_one(src: Path, out: Path) -> list[dict]:
    plugin, harness = build(src, out)
    report = []
    for name, text in emitted_csvs(out).items():
        csv = out / f"{name}.csv"
        csv.write_text(text)
        rows = data_rows(text)
        nranks, nnodes = 2, 1
        answers, loaded = ask(harness, plugin, csv, queries(rows), nranks, nnodes)
        for (func, size), (result, algo, proto, channels) in sorted(answers.items()):
            want = expected(rows, func, size)
            got = None if algo < 0 else (algo, proto, channels)
            report.append(
                {
                    "csv": name,
                    "func": func,
                    "bytes": size,
                    "expected": want,
                    "plugin": got,
                    "ok": result == 0 and got == want,
                }
            )
        report.append(
            {
                "csv": name,
                "rows": len(rows),
                "loaded_by_plugin": len(loaded),
                "ok": len(loaded) == len(rows),
            }
        )
    return report


def stage_two(out: Path, plugin: Path) -> list[dict]:
    """NCCL loads the plugin in a two-rank --share-gpu sweep; its TUNING lines must follow the rows."""
    rows = [
        ["allreduce", "0", "65536", "tree", "simple", "-1", "-1", "-1"],
        ["allreduce", "65537", "4294967295", "ring", "ll", "-1", "-1", "-1"],
    ]
    csv = out / "nccl-stage.csv"
    csv.write_text(
        "# ncclprobe tuner check: rows for NCCL itself (-1 nodes and ranks: --share-gpu meets as 2 nodes)\n"
        + "".join(",".join(r) + "\n" for r in rows)
    )
    results = out / "nccl-stage.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclprobe",
            "-q",
            "sweep",
            "--share-gpu",
            "2",
            "--proto",
            "default",
            "--algo",
            "default",
            "--sizes",
            "4K,1M",
            "--mode",
            "eager",
            "--set",
            f"NCCL_TUNER_PLUGIN={plugin}",
            "--set",
            f"NCCL_TUNER_CONFIG_FILE={csv}",
            "--output",
            str(results),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"stage 2 sweep failed ({done.returncode}): {done.stderr[-2000:]}")
    from ncclprobe.records import read_results

    report = []
    for config in read_results(results).configs:
        proof = config.get("proof") or {}
        read = proof.get("set_by_environment", {})
        for entry in proof.get("tuning", []):
            want = expected(rows, FUNCS["allreduce"], entry["size_bytes"])
            got = (
                ALGOS.index(entry["algo"].lower()),
                PROTOS.index(entry["proto"].lower()),
                want[2] if want else None,
            )
            report.append(
                {
                    "csv": "nccl-stage",
                    "bytes": entry["size_bytes"],
                    "calls": entry["calls"],
                    "expected": want,
                    "nccl": got,
                    "ok": want is not None and got[:2] == want[:2],
                    "plugin_read": "NCCL_TUNER_PLUGIN" in read,
                }
            )
    if not report:
        report.append(
            {"csv": "nccl-stage", "ok": False, "why": "no TUNING line in the sweep's proof"}
        )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "plugin_src", type=Path, help="NCCL's ext-tuner/example directory (plugin.c, nccl/*.h)"
    )
    parser.add_argument("out", type=Path, help="output directory (created)")
    parser.add_argument(
        "--nccl", action="store_true", help="stage 2: NCCL loads the plugin (one GPU)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report = stage_one(args.plugin_src, args.out)
    if args.nccl:
        report += stage_two(args.out, args.out / "libnccl-tuner-example.so")
    (args.out / "tuner_check.json").write_text(json.dumps(report, indent=1))
    for item in report:
        if not item["ok"]:
            print("MISMATCH", json.dumps(item))
    print(f"{'check':<28} {'items':>6} {'ok':>6}")
    for name in dict.fromkeys(item["csv"] for item in report):
        mine = [item for item in report if item["csv"] == name]
        print(f"{name:<28} {len(mine):>6} {sum(item['ok'] for item in mine):>6}")
    sys.exit(0 if all(item["ok"] for item in report) else 1)


if __name__ == "__main__":
    main()
