"""The side-by-side tables of examples/agreement_nccl_tests.py: nccl-tests' time per call beside
ncclprobe's for the same collective, size, placement and mode, read with ncclprobe's own readers
(nccl-tests -J through `evidence.nccl_tests_json`, sweep results through `records.read_results`).

Besides the agreement rows, three tables explain the differences with what the same call measured:
  - graph replay amortisation: nccl-tests' graph figure at -G 1, 10, 100 and -n 20 beside ours
    (its wall clock over the launches includes each replay's launch and the final sync; ours
    times one replay of 100 calls with CUDA events);
  - the torch path in a graph: the raw path's out-of-place call, torch's out of place and torch's
    in place, per collective (torch has no out-of-place all_reduce, broadcast or reduce: a copy
    plus the in-place call);
  - rooted collectives over two time-sliced socket ranks: nccl-tests' rank mean (-a 1, its
    default) and slowest rank (-a 3) beside ours (the slowest rank, docs/METRICS.md).
"""

from __future__ import annotations

import json
from pathlib import Path

BOUND_ONE_RANK, BOUND_SHARED = 15.0, 10.0  # issue 32, percent: eager one rank; two ranks
SYMMETRIC = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")


def tests_times(path: Path) -> dict[tuple, float]:
    """(in_place, size) -> nccl-tests' time per call (µs)."""
    from ncclprobe.evidence.nccl.nccl_tests_json import parse_nccl_tests_json

    run = parse_nccl_tests_json(path.read_text(), str(path))
    return {
        (in_place, row.size_bytes): m.time_us
        for row in run.rows
        for in_place, m in row.measurements()
        if m and m.time_us
    }


def probe_records(path: Path) -> list[dict]:
    from ncclprobe.records import Status, read_results

    return [
        r.to_record() for r in read_results(path).results if r.status == Status.OK and r.time_us
    ]


def load(tests_dirs: list[Path], out: Path, probe_names) -> tuple[dict, dict, dict]:
    """(nccl-tests run -> times, sweep -> records, nccl-tests run -> the folder it came from);
    a later folder's run replaces an earlier one's."""
    tests, sources = {}, {}
    for folder in tests_dirs:
        for path in sorted(folder.glob("tests-*.json")):
            try:
                tests[path.stem] = tests_times(path)
                sources[path.stem] = str(folder)
            except Exception as exc:  # a run that failed half-way: said, not fatal
                print(f"{path.name}: not read ({exc})")
    probes = {
        name: probe_records(out / f"{name}.jsonl")
        for name in probe_names
        if (out / f"{name}.jsonl").exists()
    }
    return tests, probes, sources


def index(records: list[dict]) -> dict[tuple, dict]:
    """(collective, mode, in_place, size) -> record."""
    return {(r["collective"], r["mode"], r["in_place"], r["size_bytes"]): r for r in records}


def agreement_rows(tests: dict, probes: dict, collectives) -> list[dict]:
    rows = []
    runs = (
        (1, "nccl", "probe-nccl", ""),
        (1, "torch", "probe-torch", ""),
        (2, "nccl", "probe-shared-nccl", "shared-"),
        (2, "torch", "probe-shared-torch", "shared-"),
    )
    for ranks, path, probe_name, infix in runs:
        ours = index(probes.get(probe_name, []))
        for coll in collectives:
            for mode in ("eager", "graph"):
                reference = tests.get(f"tests-{coll}-{infix}{mode}") or {}
                for (in_place, size), ref in sorted(reference.items()):
                    r = ours.get((coll, mode, in_place, size))
                    if r is None:
                        continue
                    rows.append(_row(coll, mode, ranks, path, in_place, size, ref, r))
    return rows


def _row(coll, mode, ranks, path, in_place, size, ref, r) -> dict:
    delta = 100 * (r["time_us"] - ref) / ref
    bound = BOUND_ONE_RANK if ranks == 1 else BOUND_SHARED
    judged = path == "nccl" and mode == "eager" and (ranks == 1 or coll in SYMMETRIC)
    split = r.get("cost_split") or {}
    return {
        "collective": coll,
        "mode": mode,
        "ranks": ranks,
        "path": path,
        "place": "in" if in_place else "out",
        "size_bytes": size,
        "nccl_tests_us": round(ref, 3),
        "ncclprobe_us": round(r["time_us"], 3),
        "p10_us": _round(r.get("time_us_p10")),
        "p90_us": _round(r.get("time_us_p90")),
        "delta_pct": round(delta, 1),
        "bound_pct": bound if judged else None,
        "within": abs(delta) <= bound if judged else None,
        "cpu_issue_us": _round(r.get("cpu_issue_us")),
        "nccl_us": split.get("nccl_us"),
        "torch_dispatch_us": split.get("torch_dispatch_us"),
        "events_us": split.get("events_us"),
    }


def _round(value, digits=3):
    return None if value is None else round(value, digits)


def amortisation(tests: dict, probes: dict) -> list[dict]:
    """all_reduce out of place, one rank, graph: nccl-tests at several replay counts beside ours."""
    columns = {
        "tests -n 20 -G 10": tests.get("tests-all_reduce-graph-n20") or {},
        "tests -n 100 -G 1": tests.get("tests-all_reduce-graph-G1") or {},
        "tests -n 100 -G 10": tests.get("tests-all_reduce-graph") or {},
        "tests -n 100 -G 100": tests.get("tests-all_reduce-graph-G100") or {},
    }
    raw = index(probes.get("probe-nccl", []))
    torch = index(probes.get("probe-torch", []))
    sizes = sorted({size for c in columns.values() for (_, size) in c})
    rows = []
    for size in sizes:
        row = {"size_bytes": size}
        row.update({name: _round(c.get((False, size))) for name, c in columns.items()})
        row["ours raw, events, 1 replay of 100"] = _time(raw, "all_reduce", False, size)
        row["ours torch, events, 1 replay of 100"] = _time(torch, "all_reduce", False, size)
        rows.append(row)
    return rows


def _time(records: dict, coll: str, in_place: bool, size: int, mode: str = "graph"):
    r = records.get((coll, mode, in_place, size))
    return None if r is None else round(r["time_us"], 3)


def torch_graph(tests: dict, probes: dict, collectives) -> list[dict]:
    """One rank, graph, per collective and size: nccl-tests, the raw path, torch out and in place."""
    raw = index(probes.get("probe-nccl", []))
    torch = index(probes.get("probe-torch", []))
    rows = []
    for coll in collectives:
        reference = tests.get(f"tests-{coll}-graph") or {}
        for size in sorted({s for (_, s) in reference}):
            rows.append(
                {
                    "collective": coll,
                    "size_bytes": size,
                    "tests out": _round(reference.get((False, size))),
                    "raw out": _time(raw, coll, False, size),
                    "torch out": _time(torch, coll, False, size),
                    "tests in": _round(reference.get((True, size))),
                    "raw in": _time(raw, coll, True, size),
                    "torch in": _time(torch, coll, True, size),
                }
            )
    return rows


def rooted(tests: dict, probes: dict) -> list[dict]:
    """Two ranks sharing the GPU: nccl-tests' mean and slowest rank beside ours, rooted ones."""
    rows = []
    for coll in ("broadcast", "reduce"):
        for mode in ("eager", "graph"):
            mean = tests.get(f"tests-{coll}-shared-{mode}") or {}
            slowest = tests.get(f"tests-{coll}-shared-{mode}-max") or {}
            for name in ("probe-shared-nccl", "probe-shared-torch"):
                ours = index(probes.get(name, []))
                for (in_place, size), ref in sorted(mean.items()):
                    r = ours.get((coll, mode, in_place, size))
                    if r is None:
                        continue
                    rows.append(
                        {
                            "collective": coll,
                            "mode": mode,
                            "path": name.rsplit("-", 1)[-1],
                            "place": "in" if in_place else "out",
                            "size_bytes": size,
                            "tests mean (-a 1)": round(ref, 1),
                            "tests slowest (-a 3)": _round(slowest.get((in_place, size)), 1),
                            "ours (slowest rank)": round(r["time_us"], 1),
                            "ours rank spread": _round(r.get("rank_spread_us"), 1),
                        }
                    )
    return rows


def write(tests_dirs: list[Path], out: Path, failed: list, skipped: list, wall_s: float) -> dict:
    """agreement.json and agreement.md from whatever outputs exist (a missing one: no rows)."""
    from agreement_nccl_tests import COLLECTIVES, sweep_runs

    tests, probes, sources = load(tests_dirs, out, sweep_runs())
    doc = {
        "schema_version": 2,
        "kind": "agreement-nccl-tests",
        "wall_s": round(wall_s, 1),
        "failed_steps": failed,
        "skipped_steps": skipped,
        "rows": agreement_rows(tests, probes, COLLECTIVES),
        "amortisation": amortisation(tests, probes),
        "torch_graph": torch_graph(tests, probes, COLLECTIVES),
        "rooted": rooted(tests, probes),
        "nccl_tests_sources": sources,
    }
    (out / "agreement.json").write_text(json.dumps(doc, indent=1))
    (out / "agreement.md").write_text(markdown(doc))
    return doc


def markdown(doc: dict) -> str:
    parts = []
    judged = [r for r in doc["rows"] if r["within"] is not None]
    parts.append(
        f"{sum(r['within'] for r in judged)}/{len(judged)} judged rows within their bound "
        f"(raw eager: {BOUND_ONE_RANK:g} % one rank; {BOUND_SHARED:g} % two ranks, symmetric "
        "collectives)\n"
    )
    for ranks in (1, 2):
        for mode in ("eager", "graph"):
            rows = [r for r in doc["rows"] if r["ranks"] == ranks and r["mode"] == mode]
            if rows:
                parts.append(f"### {ranks} rank(s), {mode}\n\n" + _wide(rows))
    for title, key in (
        (
            "graph replay amortisation (all_reduce, out of place, one rank, µs per call)",
            "amortisation",
        ),
        ("the torch path in a graph (one rank, µs per call)", "torch_graph"),
        ("rooted collectives, two ranks sharing the GPU (µs per call)", "rooted"),
    ):
        if doc[key]:
            parts.append(f"### {title}\n\n" + table(doc[key]))
    return "\n".join(parts)


def _wide(rows: list[dict]) -> str:
    """One line per (collective, place, size): nccl-tests, then each path with its Δ."""
    lines = {}
    for r in rows:
        key = (r["collective"], r["place"], r["size_bytes"])
        line = lines.setdefault(key, {"collective": key[0], "place": key[1], "size": key[2]})
        line["nccl-tests"] = r["nccl_tests_us"]
        mark = "" if r["within"] is not False else " (outside)"
        line[r["path"]] = f"{r['ncclprobe_us']} ({r['delta_pct']:+.1f} %{mark})"
        if r["path"] == "nccl" and r["mode"] == "eager" and r["torch_dispatch_us"] is not None:
            line["torch dispatch"] = r["torch_dispatch_us"]
            line["events"] = r["events_us"]
    return table(list(lines.values()))


def table(rows: list[dict]) -> str:
    head = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join("-" if r.get(k) is None else str(r[k]) for k in head) + " |")
    return "\n".join(out) + "\n"
