"""The side-by-side tables of examples/agreement_nccl_tests.py: nccl-tests' time per call beside
ncclprobe's for the same collective, size, placement and mode, read with ncclprobe's own readers
(nccl-tests -J through `evidence.nccl_tests_json`, sweep results through `records.read_results`).
"""

from __future__ import annotations

import json
from pathlib import Path

BOUND_ONE_RANK, BOUND_SHARED = 0.15, 0.10  # issue 32's bounds: eager one rank, two ranks


def tests_times(path: Path) -> dict[tuple, float]:
    """(in_place, size) -> nccl-tests' time per call (µs)."""
    from ncclprobe.evidence.nccl_tests_json import parse_nccl_tests_json

    run = parse_nccl_tests_json(path.read_text(), str(path))
    return {
        (in_place, row.size_bytes): m.time_us
        for row in run.rows
        for in_place, m in row.measurements()
        if m and m.time_us
    }


def probe_records(path: Path) -> list[dict]:
    from ncclprobe.records import read_results

    return [r for r in read_results(path).results if r["status"] == "ok" and r.get("time_us")]


def write(tests_dir: Path, out: Path, failed: list, skipped: list, wall_s: float) -> None:
    """agreement.json and agreement.md from whatever outputs exist (a missing one: no rows)."""
    from agreement_nccl_tests import COLLECTIVES, sweep_runs

    tests = {
        p.stem: tests_times(p) for p in sorted(tests_dir.glob("tests-*.json")) if p.stat().st_size
    }
    probes = {
        name: probe_records(out / f"{name}.jsonl")
        for name in sweep_runs()
        if (out / f"{name}.jsonl").exists()
    }
    rows = []
    for coll in COLLECTIVES:
        for mode in ("eager", "graph"):
            rows += _compare(tests, probes, coll, mode)
    doc = {
        "schema_version": 2,
        "kind": "agreement-nccl-tests",
        "wall_s": round(wall_s, 1),
        "failed_steps": failed,
        "skipped_steps": skipped,
        "rows": rows,
    }
    (out / "agreement.json").write_text(json.dumps(doc, indent=1))
    (out / "agreement.md").write_text(markdown(rows))


def _compare(tests, probes, coll, mode) -> list[dict]:
    pairs = (
        (
            "one",
            f"tests-{coll}-{mode}",
            "probe-nccl-no-events" if mode == "eager" else "probe-nccl",
            "nccl",
        ),
        ("one", f"tests-{coll}-{mode}", "probe-torch", "torch"),
        ("shared", f"tests-{coll}-shared-{mode}", "probe-shared-nccl", "nccl"),
        ("shared", f"tests-{coll}-shared-{mode}", "probe-shared-torch", "torch"),
    )
    rows = []
    for ranks, test_name, probe_name, path in pairs:
        reference = tests.get(test_name)
        records = [
            r for r in probes.get(probe_name, []) if r["collective"] == coll and r["mode"] == mode
        ]
        if not reference or not records:
            continue
        for r in records:
            ref = reference.get((r["in_place"], r["size_bytes"]))
            if not ref:
                continue
            delta = (r["time_us"] - ref) / ref
            rows.append(
                {
                    "collective": coll,
                    "mode": mode,
                    "ranks": 1 if ranks == "one" else 2,
                    "path": path,
                    "place": "in" if r["in_place"] else "out",
                    "size_bytes": r["size_bytes"],
                    "nccl_tests_us": round(ref, 3),
                    "ncclprobe_us": round(r["time_us"], 3),
                    "p10_us": r.get("time_us_p10"),
                    "p90_us": r.get("time_us_p90"),
                    "delta_pct": round(100 * delta, 1),
                    "cpu_issue_us": r.get("cpu_issue_us"),
                    "cost_split": r.get("cost_split"),
                }
            )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| collective | mode | ranks | path | place | size | nccl-tests µs | ncclprobe µs | Δ % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['collective']} | {r['mode']} | {r['ranks']} | {r['path']} | {r['place']} | "
            f"{r['size_bytes']} | {r['nccl_tests_us']} | {r['ncclprobe_us']} | {r['delta_pct']:+.1f} |"
        )
    return "\n".join(lines) + "\n"
