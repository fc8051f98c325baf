"""The custom all-reduce probe's document: results per step, verdicts against NCCL, notes, exit code.

A step's time is the slowest rank's (ncclprobe.stats: a collective ends with its last rank), median
over trials with p10/p90. A method beats NCCL at a size and mode only when the two spreads do not
overlap and the gain clears the noise rule's floor (ncclprobe.stats); under --share-gpu no verdict is given at all,
because ranks that time-slice one GPU measure the scheduler, not a link.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict

from ncclprobe.probes.custom_allreduce_plan import engine_notes
from ncclprobe.sizes import format_size
from ncclprobe.stats import Point, aggregate_trials, significant
from ncclprobe.verdict import Verdict

SCHEMA_VERSION = 1
BASELINE = "nccl"
HOST_BOUND = (
    0.9  # eager host enqueue time at 90 % of the per-call time or more: the launch path decides
)
SHARE_GPU_NOTE = (
    "--share-gpu {n}: {n} ranks time-slice GPU 0, so these times are not link times and no method "
    "is called faster; what is real is each method's correctness (the custom kernels' barriers "
    "across processes and their IPC mappings included) and whether it runs at all"
)
_KEY = ("dtype", "size_bytes", "method", "mode")


def build_document(
    spec, machine: dict, skip: dict[str, str], messages: list[dict], pool: dict
) -> dict:
    world = len(machine["gpus"])
    rows = result_rows([m for m in messages if m.get("kind") == "result"], world)
    _add_baseline_ratios(rows)
    unavailable = dict(skip)
    for m in messages:
        if m.get("kind") == "unavailable":
            unavailable.setdefault(m["method"], _reasons(m["reasons"]))
    dropped = {
        tuple(m[k] for k in _KEY): m["reasons"] for m in messages if m.get("kind") == "dropped"
    }
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "custom-allreduce",
        "nranks": world,
        "share_gpu": spec.share_gpu,
        "spec": spec.to_json(),
        "machine": machine,
        "devices": {str(m["rank"]): _device(m) for m in messages if m.get("kind") == "device"},
        "methods": {
            m["method"]: m["description"]
            for m in messages
            if m.get("kind") == "method" and m["rank"] == 0
        },
        "rows": rows,
        "verdicts": [] if spec.share_gpu else verdicts(rows),
        "unavailable": unavailable,
        "dropped": [
            {**dict(zip(_KEY, key)), "reasons": reasons} for key, reasons in dropped.items()
        ],
        "pool": pool,
    }
    doc["notes"] = notes(doc, machine)
    return doc


def result_rows(results: list[dict], world: int) -> list[dict]:
    """One row per step, across ranks, in the order the steps ran."""
    steps: dict[tuple, dict[int, dict]] = {}
    for m in results:
        steps.setdefault(tuple(m[k] for k in _KEY), {})[m["rank"]] = m
    rows = []
    for key, per_rank in steps.items():
        row = dict(zip(_KEY, key))
        row.update(asdict(aggregate_trials({rank: m["trial_us"] for rank, m in per_rank.items()})))
        hosts = [statistics.median(m["host_us"]) for m in per_rank.values() if m.get("host_us")]
        row["host_us"] = max(hosts) if hosts else None
        row["host_bound"] = bool(hosts) and max(hosts) >= HOST_BOUND * row["time_us"]
        row["wrong"] = sum(m["wrong"] for m in per_rank.values())
        row["checked"] = sum(m["checked"] for m in per_rank.values())
        row["ranks"] = len(per_rank)
        row["status"] = (
            "ok"
            if row["wrong"] == 0 and len(per_rank) == world
            else ("WRONG" if row["wrong"] else "incomplete")
        )
        rows.append(row)
    return rows


def _add_baseline_ratios(rows: list[dict]) -> None:
    """vs_nccl: NCCL's time over this row's (above 1: faster than NCCL), same dtype, size and mode."""
    base = {
        (r["dtype"], r["size_bytes"], r["mode"]): r["time_us"]
        for r in rows
        if r["method"] == BASELINE and r["status"] == "ok"
    }
    for row in rows:
        ref = base.get((row["dtype"], row["size_bytes"], row["mode"]))
        row["vs_nccl"] = round(ref / row["time_us"], 3) if ref and row["time_us"] > 0 else None


def verdicts(rows: list[dict]) -> list[dict]:
    """Per (dtype, size, mode): the fastest method that beats NCCL beyond the noise, if any."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if row["status"] == "ok":
            groups.setdefault((row["dtype"], row["size_bytes"], row["mode"]), []).append(row)
    out = []
    for (dtype, size, mode), members in groups.items():
        base = next((r for r in members if r["method"] == BASELINE), None)
        if base is None:
            continue
        faster = [r for r in members if r is not base and significant(_point(r), _point(base))]
        slower = [
            r["method"] for r in members if r is not base and significant(_point(base), _point(r))
        ]
        best = min(faster, key=lambda r: r["time_us"]) if faster else None
        if best:
            text = f"{best['method']} {best['vs_nccl']:.2f}x faster than nccl"
        elif len(members) == 1:
            text = "only nccl measured"
        elif len(slower) == len(members) - 1:
            text = "nccl fastest"
        else:
            text = "no method beats nccl beyond the noise"
        out.append(
            {
                "dtype": dtype,
                "size_bytes": size,
                "mode": mode,
                "best": best["method"] if best else BASELINE,
                "speedup_vs_nccl": best["vs_nccl"] if best else None,
                "slower_than_nccl": slower,
                "verdict": text,
            }
        )
    return out


def _point(row: dict) -> Point:
    return Point(
        size_bytes=row["size_bytes"],
        time_us=row["time_us"],
        p10_us=row["time_us_p10"],
        p90_us=row["time_us_p90"],
        trials=row["trials"],
    )


def _device(message: dict) -> dict:
    return {k: v for k, v in message.items() if k not in ("kind", "rank", "t")}


def notes(doc: dict, machine: dict) -> list[str]:
    out = [SHARE_GPU_NOTE.format(n=doc["share_gpu"])] if doc["share_gpu"] else []
    out += engine_notes(
        doc["nranks"], bool(doc["share_gpu"]), machine.get("all_nvlink"), doc["spec"]["methods"]
    )
    out += [f"{method} not measured: {why}" for method, why in doc["unavailable"].items()]
    for d in doc["dropped"]:
        reasons = _reasons(d["reasons"])
        out.append(
            f"{d['method']} FAILED at {d['dtype']} {format_size(d['size_bytes'])} {d['mode']} and was "
            f"not run further: {reasons}"
        )
    bound = [r for r in doc["rows"] if r["host_bound"]]
    if bound:
        out.append(
            f"{len(bound)} eager figure(s) are host-bound (host enqueue per call >= {HOST_BOUND:.0%} of the "
            "time per call): they show the launch path, not the collective; the graph rows do not have it"
        )
    wrong = [r for r in doc["rows"] if r["wrong"]]
    for r in wrong:
        out.append(
            f"WRONG RESULTS: {r['method']} {r['dtype']} {format_size(r['size_bytes'])} {r['mode']}: "
            f"{r['wrong']} of {r['checked']} elements differ from the exact sum"
        )
    pool = doc["pool"]
    if pool["status"] != "ok":
        out.append(
            f"the ranks ended early ({pool['status']}): {pool['reason']}; the rows are the steps that finished"
        )
    return out


def _reasons(reasons: dict[str, str]) -> str:
    """{"0": why, "1": why} as one line; {"all ranks": why} as the reason alone."""
    if list(reasons) == ["all ranks"]:
        return reasons["all ranks"]
    return "; ".join(
        f"rank {who}: {text}" if who.isdigit() else f"{who}: {text}"
        for who, text in reasons.items()
    )


def table_rows(doc: dict) -> list[dict]:
    """One line per (dtype, size, mode), one column per method: median us per call (slowest rank)."""
    methods = [m for m in doc["spec"]["methods"] if m not in doc["unavailable"]]
    verdict = {(v["dtype"], v["size_bytes"], v["mode"]): v["verdict"] for v in doc["verdicts"]}
    lines: dict[tuple, dict] = {}

    def line(entry: dict) -> dict:
        return lines.setdefault(
            (entry["dtype"], entry["size_bytes"], entry["mode"]),
            {
                "size": format_size(entry["size_bytes"]),
                "dtype": entry["dtype"],
                "mode": entry["mode"],
                **{m: None for m in methods},
            },
        )

    for row in doc["rows"]:
        line(row)[row["method"]] = (
            round(row["time_us"], 2) if row["status"] == "ok" else row["status"]
        )
    for dropped in doc["dropped"]:
        line(dropped)[dropped["method"]] = "FAILED"
    for key, cells in lines.items():
        cells["verdict"] = (
            "not link times (--share-gpu)"
            if doc["share_gpu"]
            else verdict.get(key, "no nccl baseline")
        )
    return list(lines.values())


def verdict(doc: dict) -> Verdict:
    """FINDINGS when a result was wrong, a method failed or the ranks ended early."""
    return Verdict.of(
        any(r["status"] != "ok" for r in doc["rows"])
        or bool(doc["dropped"])
        or doc["pool"]["status"] != "ok"
    )
